"""Default self-play per CPU-minute, this code against another checkout (figures, never pass/fail).

``python benchmarks/selfplay_cpu.py --baseline-src DIR`` plays the default self-play of ``yz
run`` — the turn search with the default board-tower network, ``--games`` games (default 1,024)
with ``selfplay.concurrent_games`` (256) in lockstep, the default inference dtype (``auto``:
bfloat16 on CPUs with AMX or AVX512-BF16) — once with this checkout's ``src`` and once with
``DIR/src`` (e.g. ``git archive 03c1e7c | tar -x -C /tmp/base``), each in a fresh subprocess
pinned to one core (``taskset -c 0`` when available) with one torch and one numba thread, as
``--pairs`` interleaved pairs (new, baseline, new, baseline, ...) so both sides of each ratio
share the machine's load. Each child reports its own CPU time (``time.process_time``) for the
games, after a warm-up round that compiles the kernels; the ratio is baseline CPU time ÷ new.

With ``--rows`` it also measures, in this process, the new code's ``evaluate_values`` rows per
CPU-second on the successor batches of a self-play round against the fixed-shape bfloat16
forward of the same net (a 4,096-row batch repeated), the issue's "forward-bound limit".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, tempfile, time
import numpy as np, torch
torch.set_num_threads(1)
from leaguezero.yatzy.config import YatzyConfig
try:
    from leaguezero.yatzy.net.schema import build_network
except ImportError:  # a baseline checkout from before issue 56 (the nets lived under train/)
    from leaguezero.yatzy.train.kinds import build_network
from leaguezero.yatzy.train.selfplay.turn import run_turn_selfplay
from leaguezero.az.inference.local import TorchEvaluator, resolve_dtype
from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.search.settings import SearchSettings

games = int(sys.argv[1])
cfg = YatzyConfig()
net = build_network(cfg, seed=0)
dtype = resolve_dtype(cfg.selfplay.inference_dtype, "cpu")
settings = SearchSettings.from_config(cfg)
margin = settings.margin_utility
evaluator = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, "cpu", margin_weight=margin, dtype=dtype)
# A baseline checkout from before issue 56 takes no settings (self-play built its own).
from leaguezero.yatzy.train.selfplay.slots import play_selfplay
import inspect
kw = {"settings": settings} if "settings" in inspect.signature(play_selfplay).parameters else {}
with tempfile.TemporaryDirectory() as tmp:
    run_turn_selfplay(cfg, evaluator, os.path.join(tmp, "warm"), games=16, seed=1, **kw)
    t0 = time.process_time()
    stats = run_turn_selfplay(cfg, evaluator, os.path.join(tmp, "run"), games=games, seed=2, **kw)
    cpu = time.process_time() - t0
print(json.dumps({"cpu_seconds": cpu, "games": games, "dtype": str(dtype)}))
"""


def baseline_src(checkout: Path) -> Path:
    """``checkout/src``, the other checkout's package root; exits with a clear line if absent."""
    src = checkout.resolve() / "src"
    if not (src / "leaguezero").is_dir():
        raise SystemExit(f"--baseline-src: {src} holds no leaguezero package")
    return src


def run_pinned_child(src: Path, code: str, argv: list[str], what: str) -> dict:
    """Run ``code`` (``python -c``) with the package under ``src``, pinned to one core with one
    torch and one numba thread (core 0, or ``$LEAGUEZERO_BENCH_CORE``: another core when a
    long run holds core 0); returns its last stdout line as JSON (``what`` names it in the
    error when it fails)."""
    digest = hashlib.sha1(str(src).encode()).hexdigest()[:12]
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "OMP_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
        # A numba cache per checkout: kernels of one version must not serve the other.
        "NUMBA_CACHE_DIR": str(Path(tempfile.gettempdir()) / f"lz-bench-numba-{digest}"),
    }
    cmd = [sys.executable, "-c", code, *argv]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", os.environ.get("LEAGUEZERO_BENCH_CORE", "0"), *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{what} under {src} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(src: Path, games: int) -> dict:
    """One self-play run of ``games`` games with the code under ``src``; its JSON line."""
    return run_pinned_child(src, CHILD, [str(games)], "self-play")


def rows_per_cpu_second() -> None:
    """``evaluate_values`` rows per CPU-second vs the fixed-shape bf16 forward (this code)."""
    import time

    import numpy as np
    import torch

    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.yatzy.config import YatzyConfig
    from leaguezero.yatzy.game.rules import (
        DICE_RNG,
        STATE_LEN,
        apply_actions_batch,
        new_matches,
        terminal_mask,
    )
    from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
    from leaguezero.yatzy.net.schema import build_network
    from leaguezero.yatzy.search.turn import TurnSearch

    torch.set_num_threads(1)
    net = build_network(YatzyConfig(), seed=0)
    evaluator = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0, dtype=torch.bfloat16)
    batches: list[np.ndarray] = []

    class Recorder:
        feature_schema_id, num_actions, margin_weight = TURN_FEATURE_SCHEMA_ID, 47, 1.0

        def evaluate_values(self, features):
            batches.append(features.copy())
            return evaluator.evaluate_values(features)

    search = TurnSearch(Recorder())
    games = 256
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64), DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    done = np.zeros(games, np.bool_)
    for round_ in range(90):  # about a match's decisions; finished games restart
        actions, _, _ = search.decide(states, rows)
        apply_actions_batch(states, rows, actions)
        terminal_mask(states, done)
        if done.any():
            fresh = np.flatnonzero(done)
            sub = states[fresh]
            new_matches(sub, (round_ + 1) * 1_000_003 + fresh.astype(np.int64), DICE_RNG)
            states[fresh] = sub
    fixed = torch.from_numpy(batches[0][:4096]).to(torch.bfloat16)
    total = sum(len(b) for b in batches)
    for round_ in range(3):
        t0 = time.process_time()
        for batch in batches:
            evaluator.evaluate_values(batch)
        ours = total / (time.process_time() - t0)
        t0 = time.process_time()
        with torch.inference_mode():
            for _ in range(max(1, total // 4096)):
                evaluator.model(fixed)
        forward = max(1, total // 4096) * 4096 / (time.process_time() - t0)
        print(
            f"round {round_}: evaluate_values {ours:,.0f} rows per CPU-second over "
            f"{len(batches)} calls ({total:,} rows); fixed-shape bf16 forward {forward:,.0f}; "
            f"ratio {ours / forward:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, help="the other checkout (with its src/)")
    parser.add_argument("--games", type=int, default=1024)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", action="store_true", help="also rows per CPU-second")
    args = parser.parse_args()
    if args.rows:
        rows_per_cpu_second()
    if args.baseline_src is None:
        return
    baseline = baseline_src(args.baseline_src)
    ratios, rates = [], []
    for pair in range(args.pairs):
        new = run_child(HERE / "src", args.games)
        old = run_child(baseline, args.games)
        new_rate = 60 * new["games"] / new["cpu_seconds"]
        old_rate = 60 * old["games"] / old["cpu_seconds"]
        ratios.append(new_rate / old_rate)
        rates.append((new_rate, old_rate))
        print(
            f"pair {pair}: this code {new_rate:,.0f} games per CPU-minute, baseline "
            f"{old_rate:,.0f} ({new['dtype']}): {new_rate / old_rate:.2f}x",
            flush=True,
        )
    ratios.sort()
    print(
        f"self-play games per CPU-minute, this code / baseline, {args.pairs} interleaved pairs: "
        f"min {ratios[0]:.2f} / median {ratios[len(ratios) // 2]:.2f} / max {ratios[-1]:.2f}x"
    )


if __name__ == "__main__":
    main()
