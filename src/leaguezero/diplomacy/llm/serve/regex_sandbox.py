"""Compile the regular expressions ``llm serve`` is sent in bounded worker processes.

A 13-byte expression (``a{1000}{1000}``) can keep outlines-core compiling for minutes and take
gigabytes, and a ``choice`` list is an expression too. So the server never compiles a request's
expression in its own process: :class:`RegexSandbox` hands it to a worker process
(``python -m leaguezero.diplomacy.llm.serve.regex_worker``) that

- holds the tokenizer's vocabulary (sent once, when it starts);
- runs under ``RLIMIT_AS`` (``memory_bytes``) and at niceness +10, so compiles yield the cores
  to the server's forward passes;
- is killed when the expression has cost ``time_s`` seconds of the worker's **CPU time** (read
  from ``/proc``; ``RLIMIT_CPU`` a second later is the backstop), so the bound refuses the same
  expressions however loaded the machine is (a wall-clock bound refused a test's 1-CPU-s
  expressions at load 8-24, issue 54 item 10); a worker that has not finished after
  :attr:`CompileLimits.wall_s` (a machine too loaded to give it CPU) is killed too, and that
  request gets a 503, not a refusal;
- is killed when ``gone()`` (the request's client left) turns true while it compiles;
- sends back the compiled :class:`outlines_core.Index` as bytes (``Index.from_binary``), at most
  ``max_result_bytes`` of them, with the bytes the index takes in memory once loaded, measured
  there (glibc's ``mallinfo2`` around a ``from_binary``; 4-20x the serialised size).

The ``workers`` slots are shared fairly between clients (:mod:`.fair_slots`: a queue per
client, at most ``per_client`` compiles waiting or running each, more refused at once, a free
worker goes to the client running the fewest, and ``spare_workers`` more are kept for clients
with nothing compiling), so hostile clients delay only themselves.
An expression already compiling for another request is waited for, not compiled twice. A
request that waits ``queue_s`` for a worker is refused (:class:`CompilerBusy`, a 503). Indexes
are kept in an LRU cache bounded in entries and bytes (``cache_entries``, ``cache_bytes``: the
measured memory, so what ``/stats`` reports is what the server holds); refusals (invalid, over
the CPU or memory bound, too large) in a cache of their own by expression (``refusal_entries``,
a digest each), so an expression refused once is refused again at once.

Frames between the server and a worker are an 8-byte little-endian length and the payload;
answers start with ``ok`` (8 bytes of measured memory, then the index) or ``er`` (a one-line
reason).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from leaguezero.diplomacy.llm.serve import regex_worker
from leaguezero.diplomacy.llm.serve.fair_slots import ClientOverLimit, FairSlots, SlotWaitOver
from leaguezero.diplomacy.llm.serve.regex_worker import HEADER as _HEADER

__all__ = ["ClientOverLimit", "CompileLimits", "CompilerBusy", "RegexRefused", "RegexSandbox"]
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CompileLimits:
    """Bounds on compiling one request's expression (``llm serve --regex-*`` options)."""

    time_s: float = 20.0  # CPU time of the worker per expression
    # The worker's address space (RLIMIT_AS). 1 GiB refused one phase's expression of a real
    # GRPO step on SmolLM2's 49k-token vocabulary (others compiled in 0.3-2.6 s within it).
    memory_bytes: int = 4 << 30
    workers: int = 2  # expressions compiled at once
    # Workers beyond `workers` for a client with nothing compiling (fair_slots: one user's
    # backlog holding every worker does not delay another user's first expression).
    spare_workers: int = 1
    # Compiles one client (a uid on loopback) may have running or waiting; more get 429 at
    # once. One trainer is one client: its games' phases ask at once (32 connections each).
    per_client: int = 32
    queue_s: float = 120.0  # wall time a compile may wait for a worker (then 503)
    cache_entries: int = 256
    cache_bytes: int = 256 << 20  # indexes as held in memory (measured by the worker)
    refusal_entries: int = 4096  # refused expressions remembered (a digest each)
    max_result_bytes: int = 128 << 20  # one compiled index, serialised

    @property
    def wall_s(self) -> float:
        """Wall time after which a compile is stopped whatever its CPU time (a backstop
        against a worker the machine gives no CPU; its request gets 503, not a refusal)."""
        return max(300.0, 20 * self.time_s)


class CompilerBusy(RuntimeError):
    """No worker came free within ``queue_s`` (or the machine gave one no CPU); retry later."""


class RegexRefused(ValueError):
    """An expression that is invalid or goes beyond a bound; the message is one line."""


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used; None without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


class _Worker:
    def __init__(self, vocabulary: bytes, limits: CompileLimits) -> None:
        # RLIMIT_CPU is the backstop: the server kills at time_s of CPU first.
        cpu_s = limits.time_s + 1
        cmd = [sys.executable, "-m", regex_worker.__name__, str(limits.memory_bytes), str(cpu_s)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.proc.stdin.write(_HEADER.pack(len(vocabulary)) + vocabulary)
        self.proc.stdin.flush()
        self.started = False  # its "rd" frame read: start-up CPU is not an expression's

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class _Stopped(Exception):
    """A compile ended without an index. ``outcome``: the error to raise for ``why`` — None
    for the expression's own fault (a refusal, cached), :class:`CompilerBusy` when no worker
    could take it, :func:`_not_compiled` when its client went away (not cached either)."""

    def __init__(self, why: str, outcome: Callable[[str], Exception] | None = None) -> None:
        self.why, self.outcome = why, outcome


def _not_compiled(why: str) -> RegexRefused:
    return RegexRefused(f"not compiled: {why}")


class RegexSandbox:
    """Bounded compiles of untrusted expressions for one vocabulary (see module doc).

    ``vocabulary``: an :class:`outlines_core.Vocabulary` (the tokenizer's, as
    :class:`~leaguezero.diplomacy.llm.orders.constrained.ConstraintCompiler` builds it).
    """

    def __init__(self, vocabulary, limits: CompileLimits | None = None) -> None:
        self.limits = limits or CompileLimits()
        self._vocabulary = vocabulary.__reduce__()[1][0]  # Vocabulary.from_binary's bytes
        self._slots = FairSlots(
            self.limits.workers, self.limits.per_client, self.limits.spare_workers
        )
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._cache_bytes = 0
        self._refused: OrderedDict[bytes, str] = OrderedDict()  # sha256 -> reason
        self._compiling: dict[str, threading.Event] = {}  # expression -> set when done
        self._closed = False

    # ----------------------------------------------------------------- caches
    def _cached(self, regex: str):
        """The cached index of ``regex`` or None; raises :class:`RegexRefused` if refused."""
        digest = hashlib.sha256(regex.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            found = self._cache.get(regex)
            if found is not None:
                self._cache.move_to_end(regex)
                return found[0]
            reason = self._refused.get(digest)
            if reason is not None:
                self._refused.move_to_end(digest)
        if reason is not None:
            raise RegexRefused(reason)
        return None

    def _remember(self, regex: str, index: object, nbytes: int) -> None:
        nbytes += len(regex)
        if nbytes > self.limits.cache_bytes:
            return
        with self._lock:
            old = self._cache.pop(regex, None)
            if old is not None:
                self._cache_bytes -= old[1]
            self._cache[regex] = (index, nbytes)
            self._cache_bytes += nbytes
            while (
                len(self._cache) > self.limits.cache_entries
                or self._cache_bytes > self.limits.cache_bytes
            ):
                _, (_, size) = self._cache.popitem(last=False)
                self._cache_bytes -= size

    def _refuse(self, regex: str, reason: str) -> RegexRefused:
        digest = hashlib.sha256(regex.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            self._refused[digest] = reason
            while len(self._refused) > self.limits.refusal_entries:
                self._refused.popitem(last=False)
        return RegexRefused(reason)

    def cache_stats(self) -> dict[str, int]:
        """What the caches hold and the workers do (``/stats``)."""
        slots = self._slots.stats()
        with self._lock:
            return {
                "regex_cache_entries": len(self._cache),
                "regex_cache_bytes": self._cache_bytes,
                "regex_refusals_cached": len(self._refused),
                "regex_compiles": slots["granted"],
                "regex_compiles_on_spare": slots["granted_spare"],
                "regex_compiles_running": slots["running"],
                "regex_compiles_waiting": slots["waiting"],
                "regex_clients": slots["clients"],
            }

    # --------------------------------------------------------------- workers
    def _take_worker(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker(self._vocabulary, self.limits)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        """Kill the idle workers (busy ones are killed when their compile returns)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    # --------------------------------------------------------------- compile
    def index(
        self,
        regex: str,
        gone: Callable[[], bool] = lambda: False,
        client: Callable[[], str] | str = "",
    ):
        """The :class:`outlines_core.Index` of ``regex``, compiled in a worker.

        ``gone()``: polled while waiting; True stops the compile (the request has ended).
        ``client``: who asks (or a function that says, called only when a compile is needed):
        workers are shared fairly between clients.
        Raises :class:`RegexRefused` (invalid, over a bound, or the request ended),
        :class:`ClientOverLimit` (this client has ``per_client`` compiles already) and
        :class:`CompilerBusy`.
        """
        try:
            regex.encode("utf-8")
        except UnicodeEncodeError:
            raise RegexRefused("the expression is not valid Unicode (a lone surrogate?)") from None
        deadline = time.monotonic() + self.limits.queue_s + self.limits.wall_s
        while True:
            found = self._cached(regex)
            if found is not None:
                return found
            with self._lock:
                running = self._compiling.get(regex)
                if running is None:
                    self._compiling[regex] = done = threading.Event()
            if running is None:
                break
            # The same expression is compiling for another request: its result, not a copy.
            while not running.wait(0.1):
                if gone():
                    raise RegexRefused("not compiled: the client went away")
                if time.monotonic() > deadline:
                    raise CompilerBusy("the same expression is still compiling; retry later")
        try:
            who = client() if callable(client) else client
            return self._compile(regex, gone, who)
        finally:
            with self._lock:
                del self._compiling[regex]
            done.set()

    def _compile(self, regex: str, gone: Callable[[], bool], client: str):
        from outlines_core import Index

        limits = self.limits
        try:
            self._slots.acquire(
                client,
                time.monotonic() + limits.queue_s,
                lambda: (
                    "the server is shutting down"
                    if self._closed
                    else "the client went away"
                    if gone()
                    else ""
                ),
            )
        except SlotWaitOver as over:
            if over.why == "the client went away":
                raise RegexRefused(f"not compiled: {over.why}") from None
            if over.why == "waited too long":
                raise CompilerBusy(
                    f"all {limits.workers} regex compile workers stayed busy for "
                    f"{limits.queue_s:g} s; retry later"
                ) from None
            raise CompilerBusy(over.why) from None
        try:
            worker = self._take_worker()
            try:
                kind, payload = self._exchange(worker, regex.encode("utf-8"), gone)
            except _Stopped as stop:
                worker.kill()
                if stop.outcome is not None:
                    raise stop.outcome(stop.why) from None
                raise self._refuse(regex, stop.why) from None
            except BaseException:
                worker.kill()
                raise
            self._give_back(worker)
        finally:
            self._slots.release(client)
        if kind == b"er":
            raise self._refuse(regex, payload.decode("utf-8", "replace"))
        (held,) = _HEADER.unpack_from(payload)
        del payload[: _HEADER.size]  # in place, as the kind was
        try:
            index = Index.from_binary(payload)
        except (ValueError, RuntimeError) as err:  # never seen; say so rather than a 500
            raise RegexRefused(
                f"the compile worker's answer was unreadable ({err!s:.80})"
            ) from None
        del payload
        self._remember(regex, index, held)
        return index

    def _exchange(self, worker: _Worker, data: bytes, gone) -> tuple[bytes, bytearray]:
        wall_end = time.monotonic() + self.limits.wall_s
        if not worker.started:  # a worker that cannot start is not the expression's fault
            try:
                kind, _ = self._read_answer(worker, None, wall_end, gone)
            except _Stopped as stop:
                if stop.outcome is not None:
                    raise
                raise _Stopped(
                    f"a compile worker could not start: {stop.why}", CompilerBusy
                ) from None
            if kind != b"rd":
                raise _Stopped(f"a compile worker started badly ({bytes(kind)!r})", CompilerBusy)
            worker.started = True
        cpu_start = _cpu_s(worker.proc.pid)
        try:
            worker.proc.stdin.write(_HEADER.pack(len(data)) + data)
            worker.proc.stdin.flush()
        except OSError:
            raise _Stopped(self._death(worker)) from None
        return self._read_answer(worker, cpu_start, wall_end, gone)

    def _read_answer(
        self, worker: _Worker, cpu_start: float | None, wall_end: float, gone
    ) -> tuple[bytes, bytearray]:
        """The worker's next frame (kind, payload), stopping it at the CPU bound (counted from
        ``cpu_start``), at ``wall_end`` or when ``gone()``."""
        limits = self.limits
        pid = worker.proc.pid
        fd = worker.proc.stdout.fileno()
        buffer = bytearray()
        need = _HEADER.size
        while True:
            while len(buffer) < need:
                cpu = _cpu_s(pid) if cpu_start is not None else None
                if cpu is not None and cpu - cpu_start > limits.time_s:
                    raise _Stopped(
                        f"compiling the expression took more than {limits.time_s:g} s of CPU "
                        "(simplify it)"
                    )
                if time.monotonic() > wall_end:
                    raise _Stopped(
                        f"the expression's compile got too little CPU in {limits.wall_s:g} s "
                        "(the server is overloaded); retry later",
                        "busy",
                    )
                if gone():
                    raise _Stopped("the client went away", _not_compiled)
                ready, _, _ = select.select([fd], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(fd, min(need - len(buffer), 1 << 20))
                if not chunk:
                    raise _Stopped(self._death(worker))
                buffer += chunk
            if need == _HEADER.size:
                (size,) = _HEADER.unpack(buffer)
                if size > limits.max_result_bytes + 2 + _HEADER.size:
                    raise _Stopped(
                        f"the compiled expression is larger than {limits.max_result_bytes >> 20}"
                        " MiB (simplify it)"
                    )
                buffer = bytearray()
                need = size
                continue
            kind = bytes(buffer[:2])
            del buffer[:2]  # in place: the index's bytes are not copied again
            return kind, buffer

    def _death(self, worker: _Worker) -> str:
        try:
            code = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        limits = self.limits
        if code == -signal.SIGXCPU:
            return f"compiling the expression took more than {limits.time_s:g} s of CPU"
        return (
            f"compiling the expression needed more than {limits.memory_bytes >> 20} MiB "
            f"(worker exit {code}; simplify it)"
        )
