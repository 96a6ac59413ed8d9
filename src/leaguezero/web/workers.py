"""The bounded pool agents move in: a few threads, and "busy, try again" rather than a queue.

Agent moves, searches, oracle look-ups, map renders and saved-game parsing are CPU work that
would block the event loop. They run here, at most :data:`~leaguezero.web.limits.AGENT_WORKERS`
at a time; a call that would have to wait is answered at once with :class:`Busy` (a 503 saying
to try again), so a burst of expensive requests never starves the cheap ones (pages, views,
the run page) of the server's threads or its memory.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from leaguezero.web.limits import AGENT_WORKERS

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
