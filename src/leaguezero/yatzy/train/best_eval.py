"""A run's best network measured once and large: what ``yz eval RUN`` prints and
``leaguezero report`` shows.

A run's own evaluations are small (``oracle_eval.games`` mirror games and ``match_games``
against the oracle, every iteration), and the best of many noisy estimates is biased upwards:
a run whose per-iteration figures peaked at 249 scored 241.8 on 2,000 boards. This module plays
one network alone on ``boards`` boards (the exact oracle on the same boards beside it) and
against the oracle in ``games`` paired, side-swapped games, each with its standard error, on
seeds no iteration plays (an iteration's are ``run.seed * 31 + iteration``). The result is kept
in ``RUN/eval/best_eval.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.stats import Z95, wilson_interval
from leaguezero.yatzy.agents.base import Agent

SCHEMA_VERSION = 1
# The README's reference measurement used these boards (seed) and games (seed + 1): the same
# default lets a user compare a run with it board for board.
DEFAULT_SEED = 4905235
EVAL_FILE = "best_eval.json"


def evaluate_best(
    agent: Agent,
    oracle,
    *,
    boards: int,
    games: int,
    seed: int,
    progress: Callable[[int, str], None] | None = None,
) -> dict:
    """Solitaire statistics of ``agent`` and of the oracle over ``boards`` boards (seed
    ``seed``; mirror games, two boards each) and ``agent`` against the oracle over ``games``
    paired games (seed ``seed + 1``). ``progress(n, note)``: ``n`` more boards or games done.
    Returns the JSON-ready result (per-board scores left out)."""
    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.oracle import OracleAgent
    from leaguezero.yatzy.train.loop import solitaire_phase

    report = progress or (lambda _n, _note: None)
    mirror = (boards + 1) // 2
    opponent = OracleAgent(oracle=oracle)
    solitaire = solitaire_phase(
        {"best": agent, "oracle": opponent}, oracle, mirror, seed,
        lambda _phase, n, _total: report(2 * n, "boards"),
    )  # fmt: skip
    match = play_match(agent, opponent, games, seed + 1).summary
    report(games, "games against the oracle")
    alone, perfect = solitaire["best"], solitaire["oracle"]
    for res in (alone, perfect):
        res.pop("scores")
    return {
        "schema_version": SCHEMA_VERSION,
        "seed": seed,
        "solitaire": alone,
        "oracle_solitaire": perfect,
        "vs_oracle": {**match.to_dict(), "seed": seed + 1},
    }


def write_best_eval(run: str | Path, result: dict) -> Path:
    """``RUN/eval/best_eval.json``, written atomically."""
    path = Path(run) / "eval" / EVAL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, result)
    return path


def read_best_eval(run: str | Path) -> dict | None:
    """The last :func:`write_best_eval` of ``run`` (None: never measured, or unreadable)."""
    path = Path(run) / "eval" / EVAL_FILE
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return result if result.get("schema_version") == SCHEMA_VERSION else None


def eval_lines(result: dict) -> list[str]:
    """The result in words, one line a measurement, each with its standard error."""
    alone, perfect, match = result["solitaire"], result["oracle_solitaire"], result["vs_oracle"]
    rate, se = match["a_win_rate"], match["a_win_rate_se"]
    if isinstance(se, float) and math.isfinite(se) and se > 0:  # over pairs: the paired SE
        low, high = max(0.0, rate - Z95 * se), min(1.0, rate + Z95 * se)
        rate_text = f"{rate:.4f} ± {se:.4f}"
    else:  # every game won, or every game lost: no spread, so Wilson's over the games
        low, high = wilson_interval(rate, match["games"])
        rate_text = f"{rate:.4f} (every game alike)"
    interval = f" (95% interval {low:.3f}-{high:.3f})"
    return [
        f"{result.get('model', 'best')} (boards seed {result['seed']}, games seed "
        f"{match['seed']}):",
        f"  alone       {alone['mean']:.1f} ± {alone['se']:.1f} points a board over "
        f"{alone['boards']:,} boards; the exact oracle {perfect['mean']:.1f} on the same boards "
        f"(248.4 on average); the oracle's move at {100 * alone['oracle_match_rate']:.1f}% of "
        "decisions",
        f"  vs oracle   win rate {rate_text} over {match['games']:,} paired games"
        f"{interval}; {match['score_diff_mean']:+.2f} ± {match['score_diff_se']:.2f} points a game",
        "  (± is one standard error; a win rate of 0.5 is level with the exact solitaire oracle)",
    ]
