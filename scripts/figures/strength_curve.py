"""Strength against CPU time of several ``yz run``s, measured after training.

    python scripts/figures/strength_curve.py --seed S --boards 1000 --out FIG.png \\
        NAME=RUN/snapshots [NAME=RUN/snapshots ...]

Each ``snapshots`` folder holds copies of the run's ``models/best.pt`` taken as the run went,
named ``best_cpuSSSSSS_itIIII.pt`` (S: CPU seconds the run had used, I: iterations done; the
monitor that takes them is ``scripts/figures/cpu_monitor.py``). Every snapshot plays ``--boards``
solitaire boards on the same deals (seed ``S``, chosen after training; common deals make the
snapshots' differences sharper than their ± suggests) and, with ``--oracle-games N``, N paired
games against the exact oracle. Prints a JSON line per snapshot and draws points (± 1 SE) and
the win rate against the oracle against CPU-hours, one line per run.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SNAPSHOT = re.compile(r"best_cpu(\d+)_it(\d+)\.pt$")


def _measure(path: Path, oracle, boards: int, oracle_games: int, seed: int) -> dict:
    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.oracle import OracleAgent
    from leaguezero.yatzy.agents.registry import make_agent
    from leaguezero.yatzy.train.evaluation.solitaire import solitaire_eval

    agent = make_agent(f"model:{path}")
    row = {"solitaire": solitaire_eval(agent, oracle, boards // 2, seed)}
    if oracle_games:
        match = play_match(agent, OracleAgent(oracle=oracle), oracle_games, seed + 1)
        row["vs_oracle"] = match.summary.to_dict()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="NAME=SNAPSHOT_FOLDER")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--boards", type=int, default=1000)
    parser.add_argument("--oracle-games", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=int, default=1, help="measure every Nth snapshot")
    args = parser.parse_args()

    import torch

    from leaguezero.yatzy.cli.common import load_oracle_with_notice

    torch.set_num_threads(1)
    oracle = load_oracle_with_notice(None)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    table = []
    for spec in args.runs:
        name, folder = spec.split("=", 1)
        snaps = sorted(
            (int(m[1]), int(m[2]), p)
            for p in Path(folder).glob("best_cpu*.pt")
            if (m := SNAPSHOT.search(p.name))
        )[:: args.every]
        hours, means, ses, wins, win_ses = [], [], [], [], []
        for cpu, it, path in snaps:
            row = _measure(path, oracle, args.boards, args.oracle_games, args.seed)
            sol = row["solitaire"]
            line = {"run": name, "cpu_hours": cpu / 3600, "iterations": it, "file": str(path),
                    "mean": sol["mean"], "se": sol["se"], "boards": sol["boards"]}  # fmt: skip
            if "vs_oracle" in row:
                line["vs_oracle"] = row["vs_oracle"]["a_win_rate"]
                line["vs_oracle_se"] = row["vs_oracle"]["a_win_rate_se"]
                wins.append(line["vs_oracle"])
                win_ses.append(line["vs_oracle_se"])
            print(json.dumps(line), flush=True)
            table.append(line)
            hours.append(cpu / 3600)
            means.append(sol["mean"])
            ses.append(sol["se"])
        top.errorbar(hours, means, yerr=ses, marker="o", capsize=3, label=name)
        if wins:
            bottom.errorbar(hours, wins, yerr=win_ses, marker="o", capsize=3, label=name)
    top.axhline(248.44, color="k", ls="--", lw=1, label="exact optimum 248.44")
    top.set_ylabel(f"solitaire points ({args.boards} boards, seed {args.seed})")
    top.legend()
    bottom.axhline(0.5, color="k", ls="--", lw=1)
    bottom.set_ylabel(f"win rate vs oracle ({args.oracle_games} games)")
    bottom.set_xlabel("CPU-hours of the run (its process and children)")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
