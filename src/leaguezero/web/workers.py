"""The bounded pool agents move in: a few threads, and "busy, try again" rather than a queue;
and a child process for work that must be stopped at its deadline.

Agent moves, searches, oracle look-ups, map renders and saved-game parsing are CPU work that
would block the event loop. They run here, at most :data:`~leaguezero.web.limits.AGENT_WORKERS`
at a time; a call that would have to wait is answered at once with :class:`Busy` (a 503 saying
to try again), so a burst of expensive requests never starves the cheap ones (pages, views,
the run page) of the server's threads or its memory.

A thread cannot be stopped, so a call given a time bound still runs to its end. Work whose cost
an uploader chooses (reading a saved game) runs in :func:`run_in_child` instead: a process
forked from a clean forkserver, with a CPU-time limit the kernel enforces (``RLIMIT_CPU``), and
killed when it is over; what it used (memory included) goes with it.
"""

from __future__ import annotations

import asyncio
import functools
import math
import multiprocessing
import resource
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from leaguezero.web.limits import AGENT_WORKERS, CHILD_PRELOAD

T = TypeVar("T")


class Busy(RuntimeError):
    """Every worker is busy; the message says to try again."""


class TookTooLong(ValueError):
    """A call ran past its time bound (it finishes in the background, holding its worker)."""


class AgentPool:
    """``workers`` threads; :meth:`run` never queues. Used from the event loop only."""

    def __init__(self, workers: int = AGENT_WORKERS) -> None:
        self.workers = workers
        self.running = 0  # touched on the event loop's thread only, so no lock
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="leaguezero-agent")

    def _release(self, _future: Any) -> None:
        self.running -= 1

    async def run(
        self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> T:
        """``fn(*args, **kwargs)`` on a worker thread.

        Raises :class:`Busy` when every worker is taken, :class:`TookTooLong` after
        ``timeout_s`` seconds (the worker stays taken until ``fn`` returns), and whatever ``fn``
        raises.
        """
        if self.running >= self.workers:
            raise Busy(f"busy: {self.running} agent moves are running; try again in a moment")
        loop = asyncio.get_running_loop()
        self.running += 1
        future = loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        future.add_done_callback(self._release)  # released when the thread is done, not before
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            raise TookTooLong(f"gave up after {timeout_s:g} s") from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


_forkserver_lock = threading.Lock()


def _context():
    """The forkserver context, preloading :data:`~leaguezero.web.limits.CHILD_PRELOAD` once (a
    child forks with the engine imported; the server's threads are not in the forkserver)."""
    ctx = multiprocessing.get_context("forkserver")
    with _forkserver_lock:
        ctx.set_forkserver_preload(list(CHILD_PRELOAD))
    return ctx


def start_children() -> None:
    """Start the forkserver now (it imports the engine once, seconds), so the first upload does
    not wait on it. Optional: :func:`run_in_child` starts it when first needed."""
    import multiprocessing.forkserver

    _context()
    multiprocessing.forkserver.ensure_running()


def _child_main(conn: Any, fn: Callable[..., Any], args: tuple, cpu_s: float) -> None:
    limit = max(1, math.ceil(cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))  # SIGXCPU, then SIGKILL
    try:
        conn.send(("ok", fn(*args)))
    except ValueError as err:  # a refusal: its one line crosses, not the object
        conn.send(("refused", str(err)))
    except Exception as err:  # anything else crosses as its type's name
        conn.send(("failed", type(err).__name__))
    finally:
        conn.close()


def run_in_child(fn: Callable[..., T], *args: Any, cpu_s: float, wall_s: float) -> T:
    """``fn(*args)`` in a child process with ``cpu_s`` seconds of CPU time (whole seconds,
    rounded up), killed past them or past ``wall_s`` seconds of waiting (a stopped child).

    ``fn`` must be importable by name and its result picklable. Raises :class:`TookTooLong`
    when the child ran out of time or died, ValueError with the child's message when ``fn``
    raised one, and ValueError naming the error's type for any other error. Blocks: call it
    from a worker thread.
    """
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(sender, fn, args, cpu_s), daemon=True)
    child.start()
    sender.close()
    try:
        if not receiver.poll(wall_s):
            raise TookTooLong(f"gave up after {wall_s:g} s")
        kind, value = receiver.recv()
    except EOFError:  # it died before answering: the CPU limit (or a kill, or memory)
        raise TookTooLong(f"ran out of its {max(1, math.ceil(cpu_s))} s of CPU time") from None
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
    if kind == "ok":
        return value
    if kind == "refused":
        raise ValueError(value)
    raise ValueError(f"failed ({value})")
