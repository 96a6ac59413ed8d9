"""A caller's functions as Ray tasks, with retries and one-line errors; ``distributed/`` knows no
game (the caller passes the function and its picklable arguments).

- :func:`run_task`: one function as one task, e.g. the Yatzy train phase on whichever node has
  the resources. A phase written for this is deterministic given its inputs on the shared
  filesystem and writes its outputs atomically, so a task whose process dies is simply run
  again (``max_retries``).
- :class:`RayTaskMap`: independent jobs of one function, the Ray implementation of the
  task-map contract a training loop takes (``task_map(fn, shared, jobs) -> [fn(shared, *job)
  for job in jobs]``, in order; the local one is that list comprehension, e.g.
  ``leaguezero.diplomacy.train.heroes.local_map``). ``shared`` (e.g. the hero's weights) is put into
  the object store once per call instead of once per job. A job must be a pure function of its
  arguments, so Ray's retry of a task whose worker died repeats it identically; a job still
  failing raises :class:`TaskMapError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from leaguezero.distributed.runtime import init_ray

MAX_RETRIES = 2
MAP_RETRIES = 3


def run_task(
    fn: Callable[..., Any],
    *args: Any,
    ray_address: str | None = None,
    num_gpus: int = 0,
    what: str = "task",
    max_retries: int = MAX_RETRIES,
) -> Any:
    """Run ``fn(*args)`` as a Ray task (one CPU, ``num_gpus`` GPUs) and wait for its result.

    Raises:
        RuntimeError: the task failed after its retries (the message names ``what`` and the
            cause).
    """
    ray = init_ray(ray_address)
    task = ray.remote(num_cpus=1, num_gpus=num_gpus, max_retries=max_retries)(fn)
    ref = task.remote(*args)
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:
        raise RuntimeError(
            f"the Ray {what} failed ({type(err).__name__}: {err}); rerun with --resume to try again"
        ) from None


class TaskMapError(RuntimeError):
    """A job failed on every attempt (its worker kept dying, or the function raised)."""


class RayTaskMap:
    """``task_map(fn, shared, jobs)`` with each job a Ray task reserving ``num_cpus`` CPUs.

    Args:
        ray_address: cluster to join (see :func:`leaguezero.distributed.runtime.init_ray`).
        num_cpus: CPUs each task reserves.
        max_retries: Ray retries of a task whose worker died.
    """

    in_process = False  # each job a Ray task in a worker process

    def __init__(
        self, ray_address: str | None = None, *, num_cpus: float = 1, max_retries: int = MAP_RETRIES
    ) -> None:
        self.ray = init_ray(ray_address)
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self._remote: dict[Callable[..., Any], Any] = {}

    def __call__(
        self, fn: Callable[..., Any], shared: Any, jobs: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self.ray.remote(num_cpus=self.num_cpus, max_retries=self.max_retries)(fn)
            self._remote[fn] = remote
        shared_ref = self.ray.put(shared)
        refs = [remote.remote(shared_ref, *job) for job in jobs]
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayError as err:
            name = getattr(fn, "__name__", "task")
            raise TaskMapError(
                f"Ray tasks of {name} failed after {self.max_retries} retries "
                f"({type(err).__name__}); the step was not applied, --resume replays it"
            ) from None
