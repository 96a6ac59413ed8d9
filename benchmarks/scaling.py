"""Self-play scaling: ``python benchmarks/scaling.py`` (one command; figures, never pass/fail).

Yatzy self-play decisions/s (wall clock of the whole phase, start-up included: what an
iteration sees) for

    local, 1 worker    run_selfplay in this process (the baseline)
    local, 2 workers   two spawned processes (yatzy/train/selfplay/workers.py)
    ray,   1 worker    one Ray actor on a private local Ray instance
    ray,   2 workers   two Ray actors

with every ratio taken against the in-process baseline measured in the same run. Each worker
evaluates in process with one torch thread. Ray is started once before timing (its ~5-10 s
start is a per-run cost, not a per-iteration one). ``--repeat`` takes the best of N runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import torch

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.common.config import load_config
from leaguezero.yatzy.agents.model import YATZY_SCHEMA
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.positions import make_selfplay_evaluator
from leaguezero.yatzy.train.selfplay.puct import run_selfplay
from leaguezero.yatzy.train.selfplay.workers import run_selfplay_workers


def _config(args: argparse.Namespace, workers: int, backend: str) -> YatzyConfig:
    return load_config(YatzyConfig, None, [
        f"selfplay.workers={workers}", f"run.backend={backend}",
        f"selfplay.concurrent_games={args.concurrent}", "selfplay.root_log_rate=0",
        f"mcts.budget_reroll={args.budget_reroll}", f"mcts.budget_mark={args.budget_mark}",
        f"model.hidden={args.hidden}", f"model.blocks={args.blocks}",
    ])  # fmt: skip


def _timed(label: str, fn, repeat: int) -> tuple[float, int]:
    """Best decisions/s over ``repeat`` runs of ``fn(out_dir) -> SelfPlayStats``."""
    best = 0.0
    decisions = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            stats = fn(Path(tmp) / "iter_0001")
            seconds = time.perf_counter() - start
        best = max(best, stats.decisions / seconds)
        decisions = stats.decisions
    print(f"  {label:<18} {best:>10,.0f} decisions/s  ({decisions} decisions)", flush=True)
    return best, decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=256, help="games per measurement")
    parser.add_argument("--concurrent", type=int, default=32, help="lockstep games per worker")
    parser.add_argument("--budget-reroll", type=int, default=16)
    parser.add_argument("--budget-mark", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--ray-address", default=None, help="join this cluster instead")
    args = parser.parse_args()
    torch.set_num_threads(1)

    import ray

    ray.init(address=args.ray_address or "local", include_dashboard=False, log_to_driver=False,
             **({} if args.ray_address else {"num_cpus": os.cpu_count()}))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        best = Path(tmp) / "best.pt"
        net = build_net(args.hidden, args.blocks)
        save_checkpoint(best, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=YATZY_SCHEMA)
        print(f"self-play, {args.games} games, {args.concurrent} lockstep games per worker, "
              f"budgets {args.budget_reroll}/{args.budget_mark}, net {args.hidden}x"
              f"{args.blocks}, {os.cpu_count()} CPUs, Ray {ray.__version__}")  # fmt: skip
        from leaguezero.yatzy.cli.ray_backend import run_selfplay_ray

        cfg1 = _config(args, 1, "local")
        # Warm numba's on-disk cache, so no measurement pays the first compile.
        settings = SearchSettings.from_config(cfg1)  # the runs differ in workers only
        run_selfplay(cfg1, make_selfplay_evaluator(cfg1, settings, best), Path(tmp) / "warm",
                     settings=settings, games=2, seed=0)  # fmt: skip
        results = {}

        def in_process(out: Path):
            evaluator = make_selfplay_evaluator(cfg1, settings, best)
            return run_selfplay(cfg1, evaluator, out, settings=settings, games=args.games, seed=1)

        def local_workers(out: Path):
            return run_selfplay_workers(_config(args, 2, "local"), best, out, settings=settings,
                                        games=args.games, seed=1)  # fmt: skip

        results["local, 1 worker"] = _timed("local, 1 worker", in_process, args.repeat)
        results["local, 2 workers"] = _timed("local, 2 workers", local_workers, args.repeat)
        for workers in (1, 2):
            cfg = _config(args, workers, "ray")
            label = f"ray, {workers} worker{'s' if workers > 1 else ''}"
            results[label] = _timed(
                label,
                lambda out, cfg=cfg: run_selfplay_ray(cfg, best, out, games=args.games, seed=1),
                args.repeat,
            )
    base = results["local, 1 worker"][0]
    print("ratios to local, 1 worker (same run):")
    for label, (rate, _) in results.items():
        print(f"  {label:<18} {rate / base:>6.2f}x")
    r1, r2 = results["ray, 1 worker"][0], results["ray, 2 workers"][0]
    print(f"ray 2 workers / ray 1 worker: {r2 / r1:.2f}x; "
          f"ray 2 / local 2: {r2 / results['local, 2 workers'][0]:.2f}x")  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    main()
