"""Where the league evaluator's jobs run: the :class:`JobRunner` protocol and the default
:class:`ProcessRunner` (a fresh "spawn" process per job, the local stand-in for Modal's
``spawn()``); ``leaguezero.distributed.evaluator`` has a Ray one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

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


PARENT_POLL_S = 1.0


def exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> None:
    """End this process (``os._exit(1)``) once the process ``parent`` is no longer its parent:
    now, if it died before this call, or within ``poll_s`` seconds of its death (a daemon
    thread watches ``os.getppid()``). A training run killed outright (SIGTERM, SIGKILL, OOM)
    then leaves no evaluation running on beside the run that resumes it, which plays its
    pending evaluations again."""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def run_child(target: Callable[..., Any], parent: int, *args: Any) -> Any:
    """A spawned child's entry: :func:`exit_with_parent`, then ``target(*args)``."""
    exit_with_parent(parent)
    return target(*args)


class ProcessRunner:
    """Each job in a fresh ``multiprocessing`` "spawn" process (the local ``spawn()``), which
    ends when the process that started it ends (:func:`exit_with_parent`)."""

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
