"""The Yatzy trainer on its own Ray worker: the loop's train phase as a Ray task.

The task runs :func:`leaguezero.yatzy.train.loop.train_phase` unchanged on whichever node has the
resources (a GPU when ``run.device`` is ``cuda``), reading the replay window from and writing the
candidate checkpoint to the shared run directory. The checkpoint is written atomically and the
phase is deterministic given the config and the replay on disk, so a trainer whose process dies
is simply run again (``max_retries``): the candidate is written once, whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leaguezero.distributed.runtime import init_ray
from leaguezero.yatzy.config import YatzyConfig

MAX_RETRIES = 2


def _train_task(cfg_json: str, run_root: str, it: int) -> dict[str, Any]:
    import torch

    from leaguezero.yatzy.train.loop import RunDir, train_phase

    cfg = YatzyConfig.model_validate_json(cfg_json)
    torch.set_num_threads(cfg.run.torch_threads)
    return train_phase(cfg, RunDir(run_root), it, lambda phase, advance, total: None)


def train_phase_on_ray(cfg: YatzyConfig, run: Any, it: int, report: Any) -> dict[str, Any]:
    """Run the train phase of iteration ``it`` as a Ray task and wait for its record.

    ``run`` is the loop's :class:`~leaguezero.yatzy.train.loop.RunDir` (its root must be on a shared
    filesystem); ``report(phase, advance, total)`` sees the phase start and end (the steps run
    remotely).

    Raises:
        RuntimeError: the task failed after its retries (the message names the cause).
    """
    ray = init_ray(cfg.run.ray_address)
    gpus = 1 if cfg.run.device == "cuda" else 0
    task = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=MAX_RETRIES)(_train_task)
    report("train", 0, cfg.train.steps)
    ref = task.remote(cfg.model_dump_json(), str(Path(run.root).resolve()), it)
    try:
        record = ray.get(ref)
    except ray.exceptions.RayError as err:
        raise RuntimeError(
            f"the Ray trainer task of iteration {it} failed ({type(err).__name__}: {err}); "
            "rerun with --resume to try again"
        ) from None
    report("train", cfg.train.steps, 0)
    return record
