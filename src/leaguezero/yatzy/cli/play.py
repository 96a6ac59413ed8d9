"""``yz play``: a person against an agent in the terminal (the game itself is in
:mod:`leaguezero.yatzy.agents.play`)."""

from __future__ import annotations

from typing import Annotated

import typer

from leaguezero.yatzy.cli.common import (
    AGENT_NAMES,
    ConfigOpt,
    SetOpt,
    build_cli_agent,
    load_oracle_with_notice,
    load_yatzy_config,
    search_settings,
)

app = typer.Typer()  # mounted flat by the yz app


@app.command("play")
def play(
    model: Annotated[
        str, typer.Option("--agent", help=f"Opponent: {AGENT_NAMES} or a .pt file.")
    ] = "greedy",
    seat: Annotated[int, typer.Option(min=0, max=1, help="Your seat: 0 moves first.")] = 0,
    seed: Annotated[int, typer.Option(help="Dice seed of the game.")] = 0,
    sims: Annotated[int, typer.Option(help="Search budget of a model opponent.")] = 64,
    oracle_judge: Annotated[
        bool,
        typer.Option(
            "--oracle/--no-oracle",
            help="Let the exact oracle judge your moves and answer 'hint' (builds its table "
            "once, ~20 s).",
        ),
    ] = True,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Play a game against an agent in the terminal; the oracle judges each of your moves."""
    from leaguezero.yatzy.agents.play import HELP, play_game

    settings = search_settings(load_yatzy_config(config, set_), sims)
    agent = build_cli_agent(model, settings, seed=seed, name=model)  # a network as typed
    oracle = load_oracle_with_notice(None) if oracle_judge else None
    typer.echo(HELP)

    def ask(prompt: str) -> str:
        try:
            return input(prompt)
        except EOFError:
            return "quit"

    try:
        mine, theirs = play_game(agent, seed, seat, ask, typer.echo, oracle)
    except KeyboardInterrupt:
        typer.echo("game abandoned")
        raise typer.Exit(1) from None
    verdict = "you win" if mine > theirs else "you lose" if mine < theirs else "a draw"
    typer.echo(f"final: you {mine}, {agent.name} {theirs}: {verdict}")
