"""``yz eval RUN``: what a run got, measured the way the README reports it.

A run's own evaluations are small (``oracle_eval.games`` mirror games, ``match_games`` against
the oracle, every iteration) and the run's figures are the best of many of them, so they are
noisy and, as a maximum, biased upwards. This command measures one network, the run's
``models/best.pt`` by default, once and large: its solitaire score over ``--boards`` boards
(the exact oracle on the same boards beside it) and its win rate against the oracle over
``--games`` paired, side-swapped games, each with its standard error, on seeds no iteration
used. The search is the run's own (its ``config.yaml``, evaluation mode), so the figures are
the network's as the run plays it. The result is also written to ``RUN/eval/best_eval.json``
(atomically), where ``leaguezero report`` finds it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.yatzy.cli.common import (
    build_cli_agent,
    load_oracle_with_notice,
    load_yatzy_config,
    search_settings,
    setup_threads,
)

app = typer.Typer()  # mounted flat by the yz app

# The README's reference measurement used these boards (seed) and games (seed + 1): the same
# default lets a user compare with it board for board. No iteration of a run evaluates on
# them (a run's evaluation seeds are run.seed * 31 + iteration).
DEFAULT_SEED = 4905235
EVAL_FILE = "best_eval.json"
Z95 = 1.959964


@app.command("eval")
def eval_run(
    run: Annotated[Path, typer.Argument(help="A run directory written by `yz run --out RUN`.")],
    model: Annotated[
        Path | None,
        typer.Option("--model", help="Checkpoint to evaluate (default: RUN/models/best.pt)."),
    ] = None,
    boards: Annotated[
        int, typer.Option("--boards", min=2, help="Solitaire boards (played as mirror games).")
    ] = 2000,
    games: Annotated[
        int, typer.Option("--games", min=2, help="Paired, side-swapped games against the oracle.")
    ] = 2000,
    seed: Annotated[
        int, typer.Option("--seed", help="Boards' seed; the games use seed + 1.")
    ] = DEFAULT_SEED,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """A run's best network: solitaire points and win rate against the exact oracle, with SEs."""
    from leaguezero.common.atomic import atomic_write_json
    from leaguezero.common.progress import UnitProgress
    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.oracle import OracleAgent
    from leaguezero.yatzy.train.loop import solitaire_phase

    config = run / "config.yaml"
    if not config.is_file():
        raise fail(f"{run} is not a run directory (no config.yaml): give the --out of `yz run`")
    checkpoint = model if model is not None else run / "models" / "best.pt"
    if not checkpoint.is_file():
        raise fail(f"{checkpoint} does not exist: the run has not finished an iteration yet")
    cfg = load_yatzy_config(config, [])
    setup_threads(cfg)
    settings = search_settings(cfg, cfg.oracle_eval.sims)
    agent = build_cli_agent(str(checkpoint), settings, checkpoint=True)
    oracle = load_oracle_with_notice(None)
    mirror = (boards + 1) // 2  # solitaire_eval plays mirror games, two boards each
    agents = {"best": agent, "oracle": OracleAgent(oracle=oracle)}
    with UnitProgress(f"yz eval {checkpoint}", 4 * mirror + games, unit="games") as bar:
        # The loop's own solitaire evaluation (mirror games: two boards each), the oracle on
        # the same boards beside the network.
        solitaire = solitaire_phase(
            agents, oracle, mirror, seed, lambda _phase, n, _total: bar.advance(2 * n, "boards")
        )
        match = play_match(agent, agents["oracle"], games, seed + 1).summary
        bar.advance(games, note="games against the oracle done")
    alone, perfect = solitaire["best"], solitaire["oracle"]
    for res in (alone, perfect):
        res.pop("scores")
    result = {
        "schema_version": 1,
        "model": str(checkpoint),
        "seed": seed,
        "solitaire": alone,
        "oracle_solitaire": perfect,
        "vs_oracle": {**match.to_dict(), "seed": seed + 1},
    }
    (run / "eval").mkdir(parents=True, exist_ok=True)
    atomic_write_json(run / "eval" / EVAL_FILE, result)
    if json_out:
        typer.echo(json.dumps(result))
        return
    typer.echo("\n".join(eval_lines(result)))


def eval_lines(result: dict) -> list[str]:
    """The plain-text report of :func:`eval_run` (also ``leaguezero report``'s wording)."""
    alone, perfect, match = result["solitaire"], result["oracle_solitaire"], result["vs_oracle"]
    rate, se = match["a_win_rate"], match["a_win_rate_se"]
    low, high = max(0.0, rate - Z95 * se), min(1.0, rate + Z95 * se)
    se_ok = isinstance(se, float) and math.isfinite(se)
    interval = f" (95% interval {low:.3f}-{high:.3f})" if se_ok else ""
    return [
        f"{result['model']} (boards seed {result['seed']}, games seed {match['seed']}):",
        f"  alone       {alone['mean']:.1f} ± {alone['se']:.1f} points a board over "
        f"{alone['boards']:,} boards; the exact oracle {perfect['mean']:.1f} on the same boards "
        f"(248.4 on average); the oracle's move at {100 * alone['oracle_match_rate']:.1f}% of "
        f"decisions",
        f"  vs oracle   win rate {rate:.4f} ± {se:.4f} over {match['games']:,} paired games"
        f"{interval}; {match['score_diff_mean']:+.2f} ± {match['score_diff_se']:.2f} points a game",
        "  (± is one standard error; a win rate of 0.5 is level with the exact solitaire oracle)",
    ]
