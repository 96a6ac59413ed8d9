"""The league evaluator as a Ray task: the spec's ``spawn()`` on a cluster (league spec §2).

:class:`RayEvaluator` is :class:`~leaguezero.league.evaluator.AsyncEvaluator` with the
background process replaced by a Ray task that runs the same
:func:`~leaguezero.league.evaluator.run_evaluation` job. The policy is the same:
``maybe_submit`` every step starts a job every ``every`` steps, one job runs at a time, a newer
request replaces an older waiting one, and a job that fails — an exception, or its worker
process dying — is reported (``league.evaluation_failed``) and resubmitted up to
``max_retries`` times. The registry is only written under its file lock with atomic replaces,
so a killed task never leaves ``league.json`` half written; its path must be on a filesystem
that the cluster's nodes share.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from leaguezero.distributed.runtime import init_ray
from leaguezero.league.evaluator import AsyncEvaluator, EvalJob, _job_main


@dataclass
class _RayRunning:
    job: EvalJob
    ref: Any  # ray.ObjectRef of the task's result
    attempt: int


class RayEvaluator(AsyncEvaluator):
    """:class:`AsyncEvaluator` whose jobs run as Ray tasks (same arguments, plus the address).

    Args:
        ray_address: cluster to join (see :func:`leaguezero.distributed.runtime.init_ray`).
        num_cpus: CPUs the task reserves on the cluster.
        **kwargs: as for :class:`AsyncEvaluator`.
    """

    def __init__(self, *, ray_address: str | None = None, num_cpus: float = 1, **kwargs: Any):
        super().__init__(**kwargs)
        self.ray = init_ray(ray_address)
        # Retries are ours (as in the local evaluator), so that every failure is reported.
        self._task = self.ray.remote(num_cpus=num_cpus, max_retries=0)(_job_main)
        self._running: _RayRunning | None = None  # type: ignore[assignment]

    def poll(self) -> None:
        """Reap a finished task (reporting and retrying failures) and start a waiting job."""
        running = self._running
        if running is not None:
            ready, _ = self.ray.wait([running.ref], timeout=0)
            if ready:
                self._running = None
                try:
                    self.ray.get(running.ref)
                except self.ray.exceptions.RayError as err:
                    self._job_failed(
                        running.job, running.attempt, exitcode=None, error=type(err).__name__
                    )
                else:
                    self.completed.append(running.job)
        if self._running is None and self._waiting is not None:
            job, self._waiting = self._waiting, None
            self._start(job, 0)

    def running_pid(self) -> int | None:
        """Ray tasks run in pooled worker processes; there is no process id to report."""
        return None

    @property
    def running(self) -> bool:
        """True while a task runs."""
        return self._running is not None

    def wait(self, timeout: float = 600.0) -> bool:
        """Block until no job runs or waits (retries included); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.busy:
            if time.monotonic() > deadline:
                return False
            if self._running is not None:
                self.ray.wait([self._running.ref], timeout=0.05)
            self.poll()
        return True

    def close(self, timeout: float = 600.0) -> None:
        """Wait for the last job (at most ``timeout`` s), then cancel whatever still runs."""
        finished = self.wait(timeout)
        if not finished and self._running is not None:
            self.ray.cancel(self._running.ref, force=True)
        if self.events is not None:
            self.events.close()

    def _start(self, job: EvalJob, attempt: int) -> None:
        ref = self._task.remote(job, self.threads)
        self._running = _RayRunning(job, ref, attempt)
        self._emit("league.evaluation_started", job=job, attempt=attempt, pid=None, backend="ray")


def league_evaluator_factory(
    backend: str, ray_address: str | None
) -> Callable[..., AsyncEvaluator]:
    """The evaluator class for a run's ``run.backend`` (``local``: a process per job)."""
    if backend == "ray":
        return partial(RayEvaluator, ray_address=ray_address)
    return AsyncEvaluator
