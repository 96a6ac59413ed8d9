"""``yz eval RUN``: what a run got, measured the way the README reports it.

The run's ``models/best.pt`` (or ``--model``) alone on ``--boards`` boards and against the exact
oracle over ``--games`` paired games, each with its standard error, in the run's own search
settings (its ``config.yaml``, evaluation mode); the measurement itself is
:mod:`leaguezero.yatzy.train.best_eval`, which also keeps it in ``RUN/eval/best_eval.json`` for
``leaguezero report``.
"""

from __future__ import annotations

import json
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
from leaguezero.yatzy.train.best_eval import DEFAULT_SEED

app = typer.Typer()  # mounted flat by the yz app


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
        int,
        typer.Option("--seed", help="The boards' seed (no iteration plays it); games: seed + 1."),
    ] = DEFAULT_SEED,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """A run's best network: solitaire points and win rate against the exact oracle, with SEs."""
    from leaguezero.common.progress import UnitProgress
    from leaguezero.yatzy.train.best_eval import eval_lines, evaluate_best, write_best_eval

    config = run / "config.yaml"
    if not config.is_file():
        raise fail(f"{run} is not a run directory (no config.yaml): give the --out of `yz run`")
    checkpoint = model if model is not None else run / "models" / "best.pt"
    if not checkpoint.is_file():
        raise fail(f"{checkpoint} does not exist: the run has not finished an iteration yet")
    cfg = load_yatzy_config(config, [])
    setup_threads(cfg)
    agent = build_cli_agent(
        str(checkpoint), search_settings(cfg, cfg.oracle_eval.sims), checkpoint=True
    )
    oracle = load_oracle_with_notice(None)
    total = 2 * (2 * ((boards + 1) // 2)) + games  # the network's boards, the oracle's, games
    with UnitProgress(f"yz eval {checkpoint}", total, unit="games") as bar:
        result = evaluate_best(agent, oracle, boards=boards, games=games, seed=seed,
                               progress=lambda n, note: bar.advance(n, note))  # fmt: skip
    result = {"model": str(checkpoint), **result}
    write_best_eval(run, result)
    if json_out:
        typer.echo(json.dumps(result))
        return
    typer.echo("\n".join(eval_lines(result)))
