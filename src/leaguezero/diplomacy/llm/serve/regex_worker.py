"""The compile worker process of :mod:`.regex_sandbox` (``python -m`` this module).

It reads the tokenizer's vocabulary (one frame), says it has started (``rd``), then compiles
one expression a frame under ``RLIMIT_AS`` and a CPU-time ``RLIMIT_CPU`` (the server's own CPU
check is the first bound; this is the backstop), at niceness +10, and answers each with ``ok``
(8 bytes: the memory the index takes once loaded, measured here; then the index's bytes) or
``er`` (a one-line reason). Frames are an 8-byte little-endian length and the payload.
"""

from __future__ import annotations

import ctypes
import os
import resource
import struct
import sys
from collections.abc import Callable

HEADER = struct.Struct("<Q")
# Workers yield the CPU to the server's own threads: hostile compiles at full tilt on every core
# must not slow the forward passes of good requests (a plain request beside three hostile
# compiles on 2 shared cores: 1.9 s at niceness 0, 0.14-0.49 s at +10).
WORKER_NICENESS = 10


def _read_frame(stream) -> bytes | None:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    return stream.read(size)


def _write_frame(stream, kind: bytes, payload: bytes) -> None:
    stream.write(HEADER.pack(len(kind) + len(payload)) + kind + payload)
    stream.flush()


def _malloc_meter() -> Callable[[bytes], int]:
    """A function of an index's bytes giving the memory its :meth:`Index.from_binary` takes:
    glibc's allocated bytes around one (this process is single-threaded), else 20x the bytes
    (the most measured on small indexes)."""
    from outlines_core import Index

    try:
        libc = ctypes.CDLL("libc.so.6")
        fields = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

        class Info(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in fields.split()]

        libc.mallinfo2.restype = Info
    except (OSError, AttributeError):
        return lambda blob: 20 * len(blob)

    def allocated() -> int:
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd

    def measure(blob: bytes) -> int:
        before = allocated()
        try:
            loaded = Index.from_binary(blob)
        except MemoryError:  # within RLIMIT_AS the index fits once, not twice: a guess
            return 20 * len(blob)
        held = allocated() - before
        del loaded
        return max(held, len(blob))

    return measure


def _worker_main(memory_bytes: int, cpu_s: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.nice(WORKER_NICENESS)
    from outlines_core import Index, Vocabulary

    source, sink = sys.stdin.buffer, sys.stdout.buffer
    vocabulary = Vocabulary.from_binary(_read_frame(source))
    held_bytes = _malloc_meter()
    _write_frame(sink, b"rd", b"")  # started: the CPU of an expression counts from here
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
        blob = index.__reduce__()[1][0]
        del index
        _write_frame(sink, b"ok", HEADER.pack(held_bytes(blob)) + blob)


if __name__ == "__main__":  # argv: the memory bound in bytes, the CPU bound per expression in s
    _worker_main(int(sys.argv[1]), float(sys.argv[2]))
