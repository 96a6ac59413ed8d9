"""Learning curves of a ``yz run``: ``python scripts/figures/turn_curve.py RUN OUT.png [START]``.

Plots, against wall-clock minutes since the run started (``START``: a Unix time; default the
creation time of ``RUN/config.yaml``), the solitaire mean of the network that was best going into
each iteration and of each candidate (50 mirror games = 100 boards per iteration, about ±4
points), and the candidate's win rates against ``greedy`` and the oracle (100 games each).
Used for ``docs/figures/yatzy_turn_default.png``, ``yatzy_turn_long.png`` and
``yatzy_default_v2.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    start = float(sys.argv[3]) if len(sys.argv) > 3 else (run / "config.yaml").stat().st_mtime
    rows = [json.loads(line) for line in (run / "logs" / "iteration_stats.ndjson").open()]
    minutes = [(r["ts"] - start) / 60 for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    top.plot(minutes, [r["best_solitaire_mean"] for r in rows], label="best going into iteration")
    top.plot(minutes, [r["solitaire_mean"] for r in rows], ".", alpha=0.5, label="candidate")
    top.axhline(248.44, color="k", ls="--", lw=1, label="oracle 248.44")
    top.axhline(176, color="gray", ls=":", lw=1, label="greedy ~176")
    top.set_ylabel("solitaire points (100 boards)")
    top.legend(loc="lower right")
    top.set_title(f"{run.name}: turn search, learning curve")
    bottom.plot(minutes, [r["win_rate_vs_greedy"] for r in rows], ".-", label="vs greedy")
    bottom.plot(minutes, [r["win_rate_vs_oracle"] for r in rows], ".-", label="vs oracle")
    bottom.axhline(0.5, color="k", ls="--", lw=1)
    bottom.set_ylabel("candidate win rate (100 games)")
    bottom.set_xlabel("minutes since the run started")
    bottom.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
