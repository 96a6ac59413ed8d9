"""One function as a Ray task, with retries and a one-line error: how a game's phase (e.g. the
Yatzy train phase) runs on whichever node has the resources.

``distributed/`` knows no game: the caller passes the function and its (picklable) arguments.
A phase written for this is deterministic given its inputs on the shared filesystem and writes
its outputs atomically, so a task whose process dies is simply run again (``max_retries``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leaguezero.distributed.runtime import init_ray

MAX_RETRIES = 2


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
