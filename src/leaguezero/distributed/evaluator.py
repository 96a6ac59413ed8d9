"""The league evaluator's jobs as Ray tasks: a background ``spawn()`` on a cluster
(docs/reference/design.md#evaluator).

:class:`RayJobRunner` is a :class:`~leaguezero.league.eval_runner.JobRunner`: pass it as
``AsyncEvaluator(..., runner=RayJobRunner(address))`` (the command-line layer does, for
``--backend ray``) and each evaluation runs the same
:func:`~leaguezero.league.eval_job.run_job` as a Ray task instead of a local process. The
evaluator's policy is unchanged: one job at a time, a newer request replaces an older waiting
one, and a failed attempt (an exception, or its worker process dying) is reported
(``league.evaluation_failed``) and resubmitted up to ``max_retries`` times — the retries are
the evaluator's, so Ray's own are off. The registry is only written under its file lock with
atomic replaces, so a killed task never leaves ``league.json`` half written; its path must be
on a filesystem the cluster's nodes share.
"""

from __future__ import annotations

from typing import Any

from leaguezero.distributed.runtime import init_ray
from leaguezero.league.eval_job import EvalJob, run_job
from leaguezero.league.eval_runner import JobOutcome


class RayJobRunner:
    """Runs evaluation jobs as Ray tasks (see the module doc).

    Args:
        ray_address: cluster to join (see :func:`leaguezero.distributed.runtime.init_ray`).
        num_cpus: CPUs each task reserves on the cluster.
    """

    name = "ray"

    def __init__(self, ray_address: str | None = None, *, num_cpus: float = 1) -> None:
        self.ray = init_ray(ray_address)
        self._task = self.ray.remote(num_cpus=num_cpus, max_retries=0)(run_job)

    def start(self, job: EvalJob, threads: int) -> Any:
        return self._task.remote(job, threads)

    def outcome(self, handle: Any) -> JobOutcome | None:
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        try:
            self.ray.get(handle)
        except self.ray.exceptions.RayError as err:
            return JobOutcome(False, {"exitcode": None, "error": type(err).__name__})
        return JobOutcome(True)

    def join(self, handle: Any, timeout: float) -> None:
        self.ray.wait([handle], timeout=timeout)

    def cancel(self, handle: Any) -> None:
        self.ray.cancel(handle, force=True)

    def pid(self, handle: Any) -> int | None:
        """Ray tasks run in pooled worker processes; there is no process id of their own."""
        return None
