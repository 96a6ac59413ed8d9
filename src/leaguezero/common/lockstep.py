"""Games played at once in threads whose model calls meet in one batch, reproducibly.

A free-running batcher batches whatever rows happen to be waiting, so which rows share a batch
depends on thread timing; in bf16 a row's numbers depend on its batch, so a greedy near tie
could go either way from run to run. A :class:`Lockstep` group makes the batch a function of
the games alone: a batch is run only once every game of the group that is still playing has
asked (or finished), and its rows are ordered by game. Each game's requests follow from its own
history, and the batches from the games' requests, so a run is reproducible for a given
number of games at once (not equal to playing them in turn, whose batches are one game's).

The player (``run_tournament``) enters :meth:`Lockstep.game` in the thread that plays a game;
the sampler (``LockstepSampler`` of the LLM runtime) finds the group with :func:`current` and
calls :meth:`Lockstep.call`. A group knows no model: ``run`` is the caller's batch function.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["Lockstep", "current"]

_CURRENT: contextvars.ContextVar[tuple[Lockstep, int] | None] = contextvars.ContextVar(
    "lockstep", default=None
)


def current() -> tuple[Lockstep, int] | None:
    """The group and game number of the game played in this thread, if any."""
    return _CURRENT.get()


class Lockstep:
    """``games`` games, at most ``at_once`` of them playing at a time (see module doc)."""

    def __init__(self, games: int, at_once: int) -> None:
        self._cond = threading.Condition()
        self._remaining = games  # games not finished
        self._at_once = at_once
        self._pending: dict[int, tuple[Sequence[Any], Callable[[list[Any]], list[Any]]]] = {}
        self._results: dict[int, list[Any] | BaseException] = {}
        self._running = False
        self.batches = 0  # for tests and logs
        self.rows = 0

    def _expected(self) -> int:
        return min(self._at_once, self._remaining)

    @contextlib.contextmanager
    def game(self, number: int) -> Iterator[None]:
        """Play game ``number`` in this thread as a member of the group."""
        token = _CURRENT.set((self, number))
        try:
            yield
        finally:
            _CURRENT.reset(token)
            with self._cond:
                self._remaining -= 1
                self._run_if_ready()

    def call(
        self, number: int, rows: Sequence[Any], run: Callable[[list[Any]], list[Any]]
    ) -> list[Any]:
        """``run(rows)``'s answer for game ``number``'s ``rows``, computed in one call of
        ``run`` over every waiting game's rows (in game order) once all have asked."""
        with self._cond:
            self._pending[number] = (list(rows), run)
            self._run_if_ready()
            while number not in self._results:
                self._cond.wait()
            result = self._results.pop(number)
        if isinstance(result, BaseException):
            raise result
        return result

    def _run_if_ready(self) -> None:
        """Run the waiting rows as one batch when every playing game has asked (lock held)."""
        if self._running or not self._pending or len(self._pending) < self._expected():
            return
        jobs = sorted(self._pending.items())
        self._pending = {}
        self._running = True
        self._cond.release()
        try:
            run = jobs[0][1][1]
            rows = [row for _, (job_rows, _) in jobs for row in job_rows]
            try:
                answers: list[Any] | BaseException = run(rows)
            except Exception as err:  # every game of the batch sees the error
                answers = err
        finally:
            self._cond.acquire()
            self._running = False
        start = 0
        for number, (job_rows, _) in jobs:
            if isinstance(answers, BaseException):
                self._results[number] = answers
            else:
                self._results[number] = answers[start : start + len(job_rows)]
            start += len(job_rows)
        self.batches += 1
        self.rows += start
        self._cond.notify_all()
        self._run_if_ready()  # jobs that arrived while the batch ran
