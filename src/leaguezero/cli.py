"""The ``leaguezero`` command line; ``yz`` is the same app as ``leaguezero yatzy``.

Only CLI modules wire concrete pieces together; heavy imports happen inside commands so that
``--help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from leaguezero import __version__
from leaguezero.common.cli import fail
from leaguezero.diplomacy.cli.app import app as diplomacy_app
from leaguezero.diplomacy.cli.llm import app as llm_app
from leaguezero.distributed.cli import app as cluster_app
from leaguezero.league.cli import app as league_app
from leaguezero.web.cli import app as web_app
from leaguezero.yatzy.cli.app import app as yatzy_app

app = typer.Typer(
    name="leaguezero",
    help="Self-play reinforcement learning for games: AlphaZero Yatzy and league training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(yatzy_app, name="yatzy", help="2-player Yatzy (AlphaZero); also available as `yz`.")
app.add_typer(
    diplomacy_app, name="diplomacy", help="No-press Diplomacy: bots, rollouts, tournaments."
)
app.add_typer(league_app, name="league", help="Inspect a run's league: agents, ratings, matches.")
app.add_typer(cluster_app, name="cluster", help="A local Ray cluster for --backend ray.")
app.add_typer(llm_app, name="llm", help="Serve a base model with LoRA adapters (vLLM-style API).")
app.add_typer(web_app)  # `leaguezero web`


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="A run directory written by `yz run`."),
) -> None:
    """Write RUN_DIR/report.html: learning curves, strength, regret, histograms, Elo."""
    from leaguezero.yatzy.train.report import build_report

    try:
        path = build_report(run_dir)
    except FileNotFoundError as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote {path} (open it in a browser)")


@app.command()
def version() -> None:
    """Print the leaguezero version."""
    typer.echo(__version__)


def main() -> None:
    app()


def yz_main() -> None:
    yatzy_app(prog_name="yz")


if __name__ == "__main__":
    sys.exit(main())
