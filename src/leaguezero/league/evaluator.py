"""The asynchronous league evaluator: rate a new checkpoint without pausing training
(docs/reference/design.md#evaluator).

Every ``every`` training steps the trainer calls :meth:`AsyncEvaluator.maybe_submit`; the job
runs in a separate process (``multiprocessing`` "spawn" context — a fresh interpreter, the
local stand-in for Modal's ``spawn()``), or wherever an injected :class:`JobRunner` puts it
(a Ray task: ``leaguezero.distributed.evaluator``).

The job itself (gatekeepers, tournament, ratings, the match log, its events) is
:mod:`~.eval_job`; where it runs, :mod:`~.eval_runner`. A job that exits non-zero is reported
(``league.evaluation_failed``) and retried up to ``max_retries`` times. One job runs at a
time; a request that arrives while one runs replaces any older waiting request
(``league.evaluation_skipped``), so a slow evaluator never builds an unbounded queue behind
training.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaguezero.common.events import EventWriter
from leaguezero.league.eval_job import EvalJob, Tournament, check_tournament
from leaguezero.league.eval_runner import JobRunner, ProcessRunner


@dataclass
class _Running:
    job: EvalJob
    handle: Any
    attempt: int


class AsyncEvaluator:
    """Runs :func:`~.eval_job.run_evaluation` jobs in the background for a training loop.

    Call :meth:`maybe_submit` every step and :meth:`poll` now and then (it is cheap); call
    :meth:`close` (or use as a context manager) at the end to wait for the last job. Failed jobs
    (non-zero exit, including being killed) are reported and retried ``max_retries`` times.
    ``runner`` says where jobs run (:class:`JobRunner`; default a local process per job);
    ``summary`` (a module-level function) adds fields to ``league.evaluation_finished``.
    """

    def __init__(
        self,
        *,
        registry_path: str | os.PathLike,
        matchlog_path: str | os.PathLike,
        events_path: str | os.PathLike | None,
        tournament: Tournament,
        tournament_kwargs: dict[str, Any] | None = None,
        summary: Callable[..., dict[str, Any]] | None = None,
        every: int = 50,
        method: str = "refit",
        elo_k: float = 32.0,
        bootstrap: int = 100,
        max_retries: int = 2,
        threads: int = 1,
        seed: int = 0,
        runner: JobRunner | None = None,
    ) -> None:
        check_tournament(tournament)  # fail fast in the trainer, not in a background process
        if summary is not None:
            check_tournament(summary)  # crosses to the job's process the same way
        if every < 1:
            raise ValueError(f"evaluator every must be >= 1, got {every}")
        self.registry_path = str(registry_path)
        self.matchlog_path = str(matchlog_path)
        self.events_path = None if events_path is None else str(events_path)
        self.events = EventWriter(events_path) if events_path is not None else None
        self.tournament = tournament
        self.tournament_kwargs = dict(tournament_kwargs or {})
        self.summary = summary
        self.every = every
        self.method = method
        self.elo_k = elo_k
        self.bootstrap = bootstrap
        self.max_retries = max_retries
        self.threads = threads
        self.seed = seed
        self.runner: JobRunner = runner if runner is not None else ProcessRunner()
        self._running: _Running | None = None
        self._waiting: EvalJob | None = None
        self.completed: list[EvalJob] = []
        self.failed: list[EvalJob] = []

    def maybe_submit(self, step: int, challenger: str) -> bool:
        """Submit an evaluation of ``challenger`` when ``step`` is a multiple of ``every``."""
        if step % self.every != 0:
            return False
        self.submit(step, challenger)
        return True

    def submit(self, step: int, challenger: str, gatekeepers: list[str] | None = None) -> None:
        """Queue an evaluation; starts at once if no job is running."""
        job = EvalJob(
            registry_path=self.registry_path,
            matchlog_path=self.matchlog_path,
            events_path=self.events_path,
            challenger=challenger,
            step=step,
            tournament=self.tournament,
            tournament_kwargs=self.tournament_kwargs,
            summary=self.summary,
            gatekeepers=None if gatekeepers is None else tuple(gatekeepers),
            method=self.method,
            elo_k=self.elo_k,
            bootstrap=self.bootstrap,
            seed=self.seed + step,
        )
        if self._waiting is not None:
            self._emit("league.evaluation_skipped", job=self._waiting, replaced_by=challenger)
        self._waiting = job
        self.poll()

    def poll(self) -> None:
        """Reap a finished job (reporting and retrying failures) and start a waiting one."""
        running = self._running
        if running is not None:
            outcome = self.runner.outcome(running.handle)
            if outcome is not None:
                self._running = None
                if outcome.ok:
                    self.completed.append(running.job)
                else:
                    self._job_failed(running.job, running.attempt, **outcome.details)
        if self._running is None and self._waiting is not None:
            job, self._waiting = self._waiting, None
            self._start(job, 0)

    def _job_failed(self, job: EvalJob, attempt: int, **details: Any) -> None:
        """Report a failed attempt (``league.evaluation_failed`` with ``details``); start the
        next attempt, or give the job up after ``max_retries`` retries."""
        retry = attempt < self.max_retries
        self._emit("league.evaluation_failed", job=job, **details, attempt=attempt, retrying=retry)
        if retry:
            self._start(job, attempt + 1)
        else:
            self.failed.append(job)

    @property
    def busy(self) -> bool:
        return self._running is not None or self._waiting is not None

    def pending(self) -> list[dict[str, Any]]:
        """The running and the waiting job (challenger, step, gatekeepers), oldest first: what
        a training state saves, so that a run killed with them unfinished submits them again
        (:meth:`leaguezero.league.session.LeagueSession.resume`)."""
        jobs = [self._running.job] if self._running is not None else []
        jobs += [self._waiting] if self._waiting is not None else []
        return [
            {
                "challenger": job.challenger,
                "step": job.step,
                "gatekeepers": None if job.gatekeepers is None else list(job.gatekeepers),
            }
            for job in jobs
        ]

    def running_pid(self) -> int | None:
        """The running job's process id (None when idle or when the runner has none)."""
        return None if self._running is None else self.runner.pid(self._running.handle)

    def wait(self, timeout: float = 600.0) -> bool:
        """Block until no job runs or waits (retries included); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.busy:
            if time.monotonic() > deadline:
                return False
            if self._running is not None:
                self.runner.join(self._running.handle, 0.05)
            self.poll()
        return True

    def close(self, timeout: float = 600.0) -> None:
        """Wait for the last job (at most ``timeout`` s), then cancel whatever still runs."""
        finished = self.wait(timeout)
        if not finished and self._running is not None:
            self.runner.cancel(self._running.handle)
        if self.events is not None:
            self.events.close()

    def __enter__(self) -> AsyncEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, job: EvalJob, attempt: int) -> None:
        handle = self.runner.start(job, self.threads)
        self._running = _Running(job, handle, attempt)
        self._emit(
            "league.evaluation_started",
            job=job,
            attempt=attempt,
            pid=self.runner.pid(handle),
            backend=self.runner.name,
        )

    def _emit(self, event: str, *, job: EvalJob, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, challenger=job.challenger, step=job.step, **fields)


def evaluator_paths(run_dir: str | os.PathLike) -> dict[str, Path]:
    """The conventional file names inside a run directory."""
    run = Path(run_dir)
    return {
        "registry": run / "league.json",
        "matchlog": run / "league_matches.ndjson",
        "events": run / "events.ndjson",
    }
