"""Several self-play worker processes on one machine.

Each worker is a separate process (spawned, so numba and torch start clean) that runs
:func:`leaguezero.yatzy.train.selfplay.slots.play_selfplay` on its share of the games with its own
worker id,
so its shards and its resume point are its own. Workers evaluate in process (each loads the best
checkpoint, one torch thread each) or share one inference server (``selfplay.infer`` =
``unix://...`` / ``tcp://...``), where their batches merge into bigger GPU batches.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leaguezero.common.processes import run_child
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.slots import SelfPlayStats


def split_games(games: int, workers: int) -> list[int]:
    """Games per worker: as even as possible, the first ones take the remainder."""
    base, extra = divmod(games, workers)
    return [base + (1 if w < extra else 0) for w in range(workers)]


def _worker_main(
    cfg_json: str,
    search: dict[str, Any],
    best_path: str,
    out_dir: str,
    games: int,
    seed: int,
    worker: int,
    roots_log: str | None,
    oracle_table: str | None,
    counter,
) -> None:
    import torch

    from leaguezero.common.events import EventWriter
    from leaguezero.yatzy.train.kinds import selfplay_function
    from leaguezero.yatzy.train.selfplay.positions import make_selfplay_evaluator, oracle_values

    cfg = YatzyConfig.model_validate_json(cfg_json)
    settings = SearchSettings.from_dict(search)  # the run's, as the parent process built it
    torch.set_num_threads(cfg.run.threads)
    evaluator = make_selfplay_evaluator(cfg, settings, Path(best_path))
    oracle = None
    if roots_log is not None:
        from leaguezero.yatzy.oracle.solver import load_oracle

        oracle = load_oracle(oracle_table)

    def progress(n: int) -> None:
        with counter.get_lock():
            counter.value += n

    stats = selfplay_function(cfg.search.kind)(
        cfg, evaluator, out_dir, settings=settings, games=games, seed=seed, worker=worker,
        roots_log=EventWriter(roots_log) if roots_log else None,
        oracle_values=oracle_values(oracle),
        progress=progress,
    )  # fmt: skip
    Path(out_dir, f".worker_{worker:02d}.stats.json").write_text(json.dumps(stats.to_dict()))


def run_selfplay_workers(
    cfg: YatzyConfig,
    best_path: Path,
    out_dir: Path,
    *,
    settings: SearchSettings,
    games: int,
    seed: int,
    roots_log: Path | None = None,
    oracle_table: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> SelfPlayStats:
    """Run ``cfg.selfplay.workers`` processes searching with ``settings``; returns their
    combined statistics.

    Raises RuntimeError naming the workers that failed (their finished games stay on disk and a
    rerun resumes them).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    procs = []
    for w, share in enumerate(split_games(games, cfg.selfplay.workers)):
        args = (cfg.model_dump_json(), settings.to_dict(), str(best_path), str(out_dir), share,
                seed, w,
                str(roots_log) if roots_log else None,
                str(oracle_table) if oracle_table else None, counter)  # fmt: skip
        proc = ctx.Process(  # a worker ends with this process (common.processes)
            target=run_child, args=(_worker_main, os.getpid(), *args), name=f"selfplay-{w}"
        )
        proc.start()
        procs.append(proc)
    seen = 0
    start = time.perf_counter()
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(0.2)
            value = counter.value
            if progress is not None and value > seen:
                progress(value - seen)
            seen = value
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM via `yz run`): stop the workers too, so none is left
        # writing shards that a resumed run's workers would also write. Shard writes are atomic.
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        raise
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(
            f"self-play worker(s) {', '.join(failed)} failed; finished games are on disk, "
            "rerun (or --resume) to complete the iteration"
        )
    if progress is not None and counter.value > seen:
        progress(counter.value - seen)
    parts = [
        json.loads((out_dir / f".worker_{w:02d}.stats.json").read_text()) for w in range(len(procs))
    ]
    seconds = time.perf_counter() - start
    return combine_stats(parts, seconds, sum(p["games"] for p in parts))


def combine_stats(parts: list[dict[str, Any]], seconds: float, games: int) -> SelfPlayStats:
    """One :class:`SelfPlayStats` from the workers' dicts (rates over the phase's wall time)."""
    keys = ("decisions", "samples", "sims", "evals", "fallbacks", "collisions")
    total = {k: sum(p[k] for p in parts) for k in keys}
    played = sum(p["games"] for p in parts)

    def weighted(key: str) -> float:
        return sum(p[key] * p["games"] for p in parts if p["games"]) / max(played, 1)

    return SelfPlayStats(
        games=games,
        **total,
        seconds=seconds,
        evaluate_seconds=sum(p["evaluate_seconds"] for p in parts),
        sims_per_s=total["sims"] / max(seconds, 1e-9),
        decisions_per_s=total["decisions"] / max(seconds, 1e-9),
        mean_score=weighted("mean_score"),
        seat0_win_rate=weighted("seat0_win_rate"),
    )
