"""CPU-seconds of one ``diplomacy eval`` game of an LLM hero, this code against another checkout
(figures, never pass/fail).

    python benchmarks/llm_eval_game.py --baseline-src /tmp/base --games 2 --pairs 2
    python benchmarks/llm_eval_game.py --baseline-src /tmp/base --games 7 --concurrent-games 7

Each side runs ``leaguezero diplomacy eval --hero HERO --opponents dumb_bot --games N --set
max_years=3 --seed S --no-save`` (default hero ``pretrained-smol``: SmolLM2 with its imitation
adapter, constrained decoding, as shipped) inside a fresh subprocess pinned to one core with one
torch thread, timing its own CPU (``time.process_time``, the model's load included: ~2 CPU-s);
``--pairs`` interleaved pairs (new, baseline, ...) share the machine's load. Prints CPU-seconds a
game per side, the ratio baseline / new, and each side's hero results (the same seeds; the games
differ where the dtypes round differently).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import contextlib, io, json, sys, time
argv = json.loads(sys.argv[1])
from leaguezero.cli import main
sys.argv = ["leaguezero", *argv]
out = io.StringIO()
started = time.process_time()
with contextlib.redirect_stdout(out):
    try:
        main()
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise
cpu = time.process_time() - started
result = json.loads(out.getvalue())
hero = result.get("hero", result)
print(json.dumps({"cpu_s": cpu, "win_rate": hero.get("win_rate"),
                  "mean_score": hero.get("mean_score"), "games": result.get("games")}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, help="the other checkout (with its src/)")
    parser.add_argument("--hero", default="pretrained-smol")
    parser.add_argument("--games", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=424242)
    parser.add_argument("--years", type=int, default=3)
    parser.add_argument(
        "--concurrent-games", type=int, default=1,
        help="games played at once, their LLM rows in one batch (diplomacy eval's option)",
    )  # fmt: skip
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from selfplay_cpu import baseline_src, run_pinned_child

    base = baseline_src(args.baseline_src) if args.baseline_src else None
    argv = [
        "diplomacy",
        "eval",
        "--hero",
        args.hero,
        "--opponents",
        "dumb_bot",
        "--games",
        str(args.games),
        "--seed",
        str(args.seed),
        "--set",
        f"max_years={args.years}",
        "--no-save",
        "--json",
    ]
    if args.concurrent_games > 1:
        argv += ["--concurrent-games", str(args.concurrent_games)]
    sides = {"new": HERE.parent / "src", "baseline": base}
    seconds: dict[str, list[float]] = {"new": [], "baseline": []}
    for pair in range(args.pairs):
        for side, src in sides.items():
            if src is None:
                continue
            row = run_pinned_child(src, CHILD, [json.dumps(argv)], f"eval ({side})")
            per_game = row["cpu_s"] / args.games
            seconds[side].append(per_game)
            print(
                f"pair {pair + 1} {side:>8}: {per_game:6.1f} CPU-s a game "
                f"({args.games} games, {args.years} years; hero win rate {row['win_rate']}, "
                f"mean score {row['mean_score']})",
                flush=True,
            )
    if seconds["baseline"]:
        ratios = [b / n for n, b in zip(seconds["new"], seconds["baseline"], strict=True)]
        print(
            f"baseline / new: {statistics.median(ratios):.2f}x less CPU a game "
            f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
