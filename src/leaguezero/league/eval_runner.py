"""Where the league evaluator's jobs run: the :class:`JobRunner` protocol and the default
:class:`ProcessRunner` (a fresh "spawn" process per job, the local stand-in for Modal's
``spawn()``); ``leaguezero.distributed.evaluator`` has a Ray one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from leaguezero.common.processes import run_child
from leaguezero.league.eval_job import EvalJob, run_job


@dataclass(frozen=True)
class JobOutcome:
    """How a finished attempt ended: ``ok``, or the details a failure report carries
    (``exitcode`` of a process, ``error`` of a remote task)."""

    ok: bool
    details: dict[str, Any] = field(default_factory=dict)


class JobRunner(Protocol):
    """Where :class:`~.evaluator.AsyncEvaluator` runs its jobs: the extension point for other
    backends.

    ``start`` launches :func:`run_job` (``job``, ``threads``) somewhere and returns a handle;
    ``outcome`` is None while it runs, then a :class:`JobOutcome` (cheap, non-blocking);
    ``join`` blocks up to ``timeout`` seconds; ``cancel`` stops it; ``pid`` is its process id
    when it has one of its own. ``name`` is logged with ``league.evaluation_started``. The
    default is :class:`ProcessRunner`; ``leaguezero.distributed.evaluator.RayJobRunner`` runs
    jobs as Ray tasks.
    """

    name: str

    def start(self, job: EvalJob, threads: int) -> Any: ...

    def outcome(self, handle: Any) -> JobOutcome | None: ...

    def join(self, handle: Any, timeout: float) -> None: ...

    def cancel(self, handle: Any) -> None: ...

    def pid(self, handle: Any) -> int | None: ...


class ProcessRunner:
    """Each job in a fresh ``multiprocessing`` "spawn" process (the local ``spawn()``), which
    ends when the process that started it ends
    (:func:`leaguezero.common.processes.exit_with_parent`)."""

    name = "process"

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")

    def start(self, job: EvalJob, threads: int) -> mp.process.BaseProcess:
        process = self._ctx.Process(
            target=run_child,
            args=(run_job, os.getpid(), job, threads),
            name=f"league-eval-{job.step}",
        )
        process.start()
        return process

    def outcome(self, handle: mp.process.BaseProcess) -> JobOutcome | None:
        if handle.is_alive():
            return None
        handle.join()
        code = handle.exitcode
        return JobOutcome(True) if code == 0 else JobOutcome(False, {"exitcode": code})

    def join(self, handle: mp.process.BaseProcess, timeout: float) -> None:
        handle.join(timeout)

    def cancel(self, handle: mp.process.BaseProcess) -> None:
        handle.terminate()
        handle.join(10)

    def pid(self, handle: mp.process.BaseProcess) -> int | None:
        return handle.pid
