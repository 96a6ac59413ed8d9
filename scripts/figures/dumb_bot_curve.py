"""Win rate against six ``dumb_bot``s of a Diplomacy run's checkpoints, measured after training.

    python scripts/figures/dumb_bot_curve.py --seed S --games 140 --max-years 5 --out FIG.png \\
        --steps 0,100,200 NAME=RUN [NAME=RUN ...] [--measured EARLIER.jsonl ...]

For each run and each step in ``--steps`` the run's ``checkpoints/ckpt_NNNNNN.pt`` (step 0: the
run's ``base_model`` checkpoint, i.e. the agent it started from) plays one against six
``dumb_bot``s (``leaguezero diplomacy eval --hero CKPT --opponents dumb_bot --games G --seed S
--set max_years=Y --no-save --json``: seats rotated over the seven powers, greedy play), every
checkpoint on the same seeds (``S``, chosen after training). The x axis counts training steps
from the run's own start plus ``--offset`` (steps of the agent it was initialised from). Prints
one JSON line per checkpoint (win rate, its binomial SE, mean supply centres) and draws win rate
± 1 SE with the parity line 1/7 and the 2 × parity goal. ``--measured`` takes the JSON lines of
earlier invocations on the same seed (a curve measured in parts, while the run still trained)
and draws those points without playing them again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib
from diplomacy_eval import run_eval

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PARITY = 1 / 7


def _checkpoint(run: Path, step: int) -> Path:
    return run / "checkpoints" / ("base_model.pt" if step == 0 else f"ckpt_{step:06d}.pt")


def _measure(ckpt: Path, games: int, seed: int, max_years: int) -> dict:
    hero = run_eval(str(ckpt), "dumb_bot", games, seed, max_years)[0]["hero"]
    rate, n = hero["win_rate"], hero["seats"]
    return {
        "win_rate": rate,
        "se": (rate * (1 - rate) / n) ** 0.5,
        "games": n,
        "mean_centers": hero["mean_centers"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="NAME=RUN_DIR")
    parser.add_argument("--steps", required=True, help="comma-separated steps (0 = start)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--games", type=int, default=140)
    parser.add_argument("--max-years", type=int, default=5)
    parser.add_argument("--offset", type=int, default=0, help="steps before the run's start")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--measured",
        type=Path,
        action="append",
        default=[],
        help="JSON lines an earlier run of this script printed (same seed, games, years): "
        "their points are drawn, not measured again (repeatable)",
    )
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    measured = {}
    for path in args.measured:
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                measured[row["run"], row["step"]] = row

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for spec in args.runs:
        name, _, folder = spec.partition("=")
        rows = []
        for step in steps:
            if (name, step) in measured:
                rows.append(measured[name, step])
                print(json.dumps(measured[name, step]), flush=True)
                continue
            ckpt = _checkpoint(Path(folder), step)
            if not ckpt.exists():
                print(f"{ckpt} does not exist; skipped", file=sys.stderr)
                continue
            row = {
                "run": name,
                "step": step,
                **_measure(ckpt, args.games, args.seed, args.max_years),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        xs = [args.offset + r["step"] for r in rows]
        ax.errorbar(
            xs, [r["win_rate"] for r in rows], yerr=[r["se"] for r in rows],
            marker="o", capsize=3, label=name,
        )  # fmt: skip
    ax.axhline(PARITY, color="grey", linestyle=":", label="parity 1/7")
    ax.axhline(2 * PARITY, color="grey", linestyle="--", label="goal 2 × parity")
    ax.set(
        xlabel="GRPO steps",
        ylabel="win rate vs six dumb_bots",
        title=f"one against six dumb_bots, {args.games} games a point, {args.max_years}-year games",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
