"""Compile the regular expressions ``llm serve`` is sent in bounded worker processes.

A 13-byte expression (``a{1000}{1000}``) can keep outlines-core compiling for minutes and take
gigabytes, and a ``choice`` list is an expression too. So the server never compiles a request's
expression in its own process: :class:`RegexSandbox` hands it to a worker process
(``python -m leaguezero.diplomacy.llm.serve.regex_sandbox``) that

- holds the tokenizer's vocabulary (sent once, when it starts);
- runs under ``RLIMIT_AS`` (``memory_bytes``) and a CPU-time ``RLIMIT_CPU`` per expression, so an
  expression that needs more memory or CPU kills the worker, not the server, and at niceness
  +10, so compiles yield the cores to the server's forward passes;
- is killed by the server when the expression takes longer than ``time_s`` of wall time, or
  when ``gone()`` (the request's client left) turns true while it compiles;
- sends back the compiled :class:`outlines_core.Index` as bytes (``Index.from_binary``), at most
  ``max_result_bytes`` of them.

At most ``workers`` expressions compile at once; a request that finds every worker busy for
``time_s`` is refused (:class:`CompilerBusy`, a 503). Results and refusals are kept in an LRU
cache bounded in entries and bytes (``cache_entries``, ``cache_bytes``; an index is counted by
its serialised size), so a repeated expression costs nothing.

Frames between the server and a worker are an 8-byte little-endian length and the payload;
answers start with ``ok`` (the index) or ``er`` (a one-line reason).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

_HEADER = struct.Struct("<Q")
# Workers yield the CPU to the server's own threads: hostile compiles at full tilt on every core
# must not slow the forward passes of good requests (a plain request beside three hostile
# compiles on 2 shared cores: 1.9 s at niceness 0, 0.14-0.49 s at +10).
WORKER_NICENESS = 10


@dataclass(frozen=True)
class CompileLimits:
    """Bounds on compiling one request's expression (``llm serve --regex-*`` options)."""

    time_s: float = 20.0  # wall time per expression (and per wait for a free worker)
    # The worker's address space (RLIMIT_AS). 1 GiB refused one phase's expression of a real
    # GRPO step on SmolLM2's 49k-token vocabulary (others compiled in 0.3-2.6 s within it).
    memory_bytes: int = 4 << 30
    workers: int = 2  # expressions compiled at once
    cache_entries: int = 256
    cache_bytes: int = 256 << 20
    max_result_bytes: int = 128 << 20  # one compiled index, serialised


class CompilerBusy(RuntimeError):
    """Every compile worker stayed busy for ``time_s``; retry later."""


class RegexRefused(ValueError):
    """An expression that is invalid or goes beyond a bound; the message is one line."""


class _Worker:
    def __init__(self, vocabulary: bytes, limits: CompileLimits) -> None:
        # The CPU bound is a backstop: the server kills on wall time first (CPU <= wall).
        cpu_s = limits.time_s + 1
        cmd = [sys.executable, "-m", __name__, str(limits.memory_bytes), str(cpu_s)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.proc.stdin.write(_HEADER.pack(len(vocabulary)) + vocabulary)
        self.proc.stdin.flush()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class _Stopped(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


class RegexSandbox:
    """Bounded compiles of untrusted expressions for one vocabulary (see module doc).

    ``vocabulary``: an :class:`outlines_core.Vocabulary` (the tokenizer's, as
    :class:`~.constrained.ConstraintCompiler` builds it).
    """

    def __init__(self, vocabulary, limits: CompileLimits | None = None) -> None:
        self.limits = limits or CompileLimits()
        self._vocabulary = vocabulary.__reduce__()[1][0]  # Vocabulary.from_binary's bytes
        self._idle: list[_Worker] = []
        self._live = 0
        self._cond = threading.Condition()
        self._cache: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._cache_bytes = 0
        self._closed = False

    # ----------------------------------------------------------------- cache
    def _cached(self, regex: str):
        with self._cond:
            found = self._cache.get(regex)
            if found is not None:
                self._cache.move_to_end(regex)
            return found

    def _remember(self, regex: str, value: object, nbytes: int) -> None:
        nbytes += len(regex)
        if nbytes > self.limits.cache_bytes:
            return
        with self._cond:
            old = self._cache.pop(regex, None)
            if old is not None:
                self._cache_bytes -= old[1]
            self._cache[regex] = (value, nbytes)
            self._cache_bytes += nbytes
            while (
                len(self._cache) > self.limits.cache_entries
                or self._cache_bytes > self.limits.cache_bytes
            ):
                _, (_, size) = self._cache.popitem(last=False)
                self._cache_bytes -= size

    def cache_stats(self) -> dict[str, int]:
        """Entries and bytes the cache holds (``/stats``)."""
        with self._cond:
            return {"regex_cache_entries": len(self._cache), "regex_cache_bytes": self._cache_bytes}

    # --------------------------------------------------------------- workers
    def _acquire(self, deadline: float, gone: Callable[[], bool]) -> _Worker:
        with self._cond:
            while not self._idle and self._live >= self.limits.workers:
                if self._closed:
                    raise CompilerBusy("the server is shutting down")
                if gone():
                    raise _Stopped("the client went away")
                if time.monotonic() > deadline:
                    raise CompilerBusy(
                        f"all {self.limits.workers} regex compile workers stayed busy for "
                        f"{self.limits.time_s:g} s; retry later"
                    )
                self._cond.wait(0.1)
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return _Worker(self._vocabulary, self.limits)
        except BaseException:
            self._discard(None)
            raise

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if self._closed:
                self._live -= 1
                worker.kill()
            else:
                self._idle.append(worker)
            self._cond.notify()

    def _discard(self, worker: _Worker | None) -> None:
        if worker is not None:
            worker.kill()
        with self._cond:
            self._live -= 1
            self._cond.notify()

    def close(self) -> None:
        """Kill the idle workers (busy ones are killed when their compile returns)."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()

    # --------------------------------------------------------------- compile
    def index(self, regex: str, gone: Callable[[], bool] = lambda: False):
        """The :class:`outlines_core.Index` of ``regex``, compiled in a worker.

        ``gone()``: polled while waiting; True stops the compile (the request has ended).
        Raises :class:`RegexRefused` (invalid, over a bound, or the request ended) and
        :class:`CompilerBusy`.
        """
        from outlines_core import Index

        found = self._cached(regex)
        if found is not None:
            if isinstance(found[0], str):
                raise RegexRefused(found[0])
            return found[0]
        try:
            data = regex.encode("utf-8")
        except UnicodeEncodeError:
            raise RegexRefused("the expression is not valid Unicode (a lone surrogate?)") from None
        deadline = time.monotonic() + self.limits.time_s
        try:
            worker = self._acquire(deadline, gone)
        except _Stopped as stop:
            raise RegexRefused(f"not compiled: {stop.why}") from None
        deadline = time.monotonic() + self.limits.time_s
        try:
            kind, payload = self._exchange(worker, data, deadline, gone)
        except _Stopped as stop:
            self._discard(worker)
            if stop.why == "the client went away":
                raise RegexRefused(f"not compiled: {stop.why}") from None
            self._remember(regex, stop.why, 0)
            raise RegexRefused(stop.why) from None
        except BaseException:
            self._discard(worker)
            raise
        self._release(worker)
        if kind == b"er":
            reason = payload.decode("utf-8", "replace")
            self._remember(regex, reason, len(reason))
            raise RegexRefused(reason)
        try:
            index = Index.from_binary(payload)
        except (ValueError, RuntimeError) as err:  # never seen; say so rather than a 500
            raise RegexRefused(
                f"the compile worker's answer was unreadable ({err!s:.80})"
            ) from None
        self._remember(regex, index, len(payload))
        return index

    def _exchange(self, worker: _Worker, data: bytes, deadline: float, gone):
        limits = self.limits
        try:
            worker.proc.stdin.write(_HEADER.pack(len(data)) + data)
            worker.proc.stdin.flush()
        except OSError:
            raise _Stopped(self._death(worker)) from None
        fd = worker.proc.stdout.fileno()
        buffer = bytearray()
        need = _HEADER.size
        while True:
            while len(buffer) < need:
                now = time.monotonic()
                if now > deadline:
                    raise _Stopped(
                        f"compiling the expression took longer than {limits.time_s:g} s "
                        "(simplify it)"
                    )
                if gone():
                    raise _Stopped("the client went away")
                ready, _, _ = select.select([fd], [], [], min(0.1, deadline - now))
                if not ready:
                    continue
                chunk = os.read(fd, min(need - len(buffer), 1 << 20))
                if not chunk:
                    raise _Stopped(self._death(worker))
                buffer += chunk
            if need == _HEADER.size:
                (size,) = _HEADER.unpack(buffer)
                if size > limits.max_result_bytes + 2:
                    raise _Stopped(
                        f"the compiled expression is larger than {limits.max_result_bytes >> 20}"
                        " MiB (simplify it)"
                    )
                buffer.clear()
                need = size
                continue
            return bytes(buffer[:2]), bytes(buffer[2:])

    def _death(self, worker: _Worker) -> str:
        try:
            code = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        limits = self.limits
        if code == -signal.SIGXCPU:
            return f"compiling the expression took longer than {limits.time_s:g} s of CPU"
        return (
            f"compiling the expression needed more than {limits.memory_bytes >> 20} MiB "
            f"(worker exit {code}; simplify it)"
        )


# ------------------------------------------------------------------- the worker
def _read_frame(stream) -> bytes | None:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    return stream.read(size)


def _write_frame(stream, kind: bytes, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(kind) + len(payload)) + kind + payload)
    stream.flush()


def _worker_main(memory_bytes: int, cpu_s: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(WORKER_NICENESS)
    from outlines_core import Index, Vocabulary

    source, sink = sys.stdin.buffer, sys.stdout.buffer
    vocabulary = Vocabulary.from_binary(_read_frame(source))
    while (data := _read_frame(source)) is not None:
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime + used.ru_stime
        limit = int(spent + cpu_s) + 1
        # The soft limit only (SIGXCPU ends the worker): a hard limit can never be raised
        # again, and the next expression's limit is higher (a worker compiles many).
        resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.RLIM_INFINITY))
        try:
            index = Index(data.decode("utf-8"), vocabulary)
        except (ValueError, RuntimeError, UnicodeDecodeError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            _write_frame(sink, b"er", f"cannot constrain to that regex: {first[:300]}".encode())
            continue
        except MemoryError:
            _write_frame(sink, b"er", b"compiling the expression ran out of memory")
            continue
        _write_frame(sink, b"ok", index.__reduce__()[1][0])


if __name__ == "__main__":  # argv: the memory bound in bytes, the CPU bound per expression in s
    _worker_main(int(sys.argv[1]), float(sys.argv[2]))
