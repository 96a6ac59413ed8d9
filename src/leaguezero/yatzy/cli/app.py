"""``yz`` (= ``leaguezero yatzy``): rules, matches, config and, as they land, oracle, search,
self-play, training, gating and the main loop."""

from __future__ import annotations

import json
from typing import Annotated

import typer
import typer.core

from leaguezero.common.cli import fail
from leaguezero.yatzy.cli.bench import app as bench_app
from leaguezero.yatzy.cli.common import (
    AGENT_NAMES,
    ConfigOpt,
    SetOpt,
    build_cli_agent,
    load_yatzy_config,
    se_text,
    search_settings,
)
from leaguezero.yatzy.cli.evaluate import app as eval_app
from leaguezero.yatzy.cli.infer import app as infer_app
from leaguezero.yatzy.cli.oracle import oracle_app
from leaguezero.yatzy.cli.play import app as play_app
from leaguezero.yatzy.cli.run import app as run_app

app = typer.Typer(
    name="yz",
    help="2-player Scandinavian Yatzy: rules, oracle, AlphaZero self-play, training, gating.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="The rules engine: scores and legal actions.", no_args_is_help=True)
config_app = typer.Typer(help="Configs: show the resolved config.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
app.add_typer(config_app, name="config")
app.add_typer(oracle_app, name="oracle")
# The command modules' own apps, mounted flat (their commands are yz's: yz run, yz play ...).
for _commands in (run_app, eval_app, play_app, infer_app, bench_app):
    app.add_typer(_commands)

DiceArg = tuple[int, int, int, int, int]
DICE_SYNTAX = "--dice needs five dice values 1..6 after it, e.g. --dice 3 3 3 5 5"


class DiceCommand(typer.core.TyperCommand):
    """A command with ``--dice``: a wrong number of dice says what to type, not only "requires
    5 arguments" (typer vendors click, so its exception classes are matched by behaviour)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as err:
            if err.param is not None and "--dice" in getattr(err.param, "opts", []):
                raise typer.BadParameter(f"{err.message}; {DICE_SYNTAX}", ctx, err.param) from None
            raise
        except Exception as err:  # click's BadOptionUsage: too few values after --dice
            if getattr(err, "option_name", None) == "--dice":
                raise type(err)("--dice", DICE_SYNTAX, ctx) from None
            raise


@config_app.command("show")
def config_show(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Print the resolved config (file + overrides + defaults) as YAML."""
    from leaguezero.common.config import config_to_yaml

    typer.echo(config_to_yaml(load_yatzy_config(config, set_)), nl=False)


def _parse_dice(dice: DiceArg) -> list[int]:
    from leaguezero.yatzy.game.tables import dice_index

    try:
        dice_index(dice)
    except ValueError as err:
        raise fail(str(err)) from None
    return sorted(dice)


@rules_app.command("score", cls=DiceCommand)
def rules_score(
    dice: Annotated[DiceArg, typer.Option("--dice", help="Five dice: --dice 1 2 3 4 5")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The points of five dice in each of the 15 categories."""
    import numpy as np

    from leaguezero.yatzy.game.rules import scores_for_dice_values
    from leaguezero.yatzy.game.tables import CATEGORIES

    values = _parse_dice(dice)
    out = np.zeros(15, dtype=np.int64)
    scores_for_dice_values(np.array(values, dtype=np.int64), out)
    scores = {cat: int(v) for cat, v in zip(CATEGORIES, out, strict=True)}
    if json_out:
        typer.echo(json.dumps({"dice": values, "scores": scores}))
        return
    for cat, v in scores.items():
        typer.echo(f"{cat:>15} {v:3d}")


@rules_app.command("legal", cls=DiceCommand)
def rules_legal(
    dice: Annotated[DiceArg, typer.Option("--dice", help="Five dice: --dice 1 2 3 4 5")],
    rerolls_left: Annotated[int, typer.Option("--rerolls-left", min=0, max=2)] = 2,
    avail_mask: Annotated[
        int, typer.Option("--avail-mask", help="Open categories; bit (14 - cat) set = open.")
    ] = 0x7FFF,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The legal actions (A = 47 indices) of a roll state."""
    import numpy as np

    from leaguezero.yatzy.game.rules import legal_mask_into
    from leaguezero.yatzy.game.tables import FULL_AVAIL, NUM_ACTIONS, action_label

    if not 0 <= avail_mask <= FULL_AVAIL:
        raise fail(f"--avail-mask must be in 0..{FULL_AVAIL} (15 bits), got {avail_mask}")
    values = _parse_dice(dice)
    mask = np.zeros(NUM_ACTIONS, dtype=np.bool_)
    legal_mask_into(avail_mask, rerolls_left, mask)
    actions = [int(a) for a in np.flatnonzero(mask)]
    if json_out:
        labels = [action_label(a, values) for a in actions]
        typer.echo(json.dumps({"dice": values, "legal": actions, "labels": labels}))
        return
    for a in actions:
        typer.echo(f"{a:3d}  {action_label(a, values)}")


@app.command("match")
def match(
    a: Annotated[str, typer.Option("--a", help=f"Agent A: {AGENT_NAMES}")],
    b: Annotated[str, typer.Option("--b", help=f"Agent B: {AGENT_NAMES}")],
    games: Annotated[
        int,
        typer.Option(help="Games to play, in side-swapped pairs (odd: one more).", min=1),
    ] = 200,
    seed: Annotated[int, typer.Option(help="Match seed (episode seeds derive from it).")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Paired, side-swapped games between two agents; dice are keyed by seat."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from leaguezero.yatzy.agents.match import play_match

    settings = search_settings(load_yatzy_config(config, set_))
    agent_a = build_cli_agent(a, settings, seed=seed)
    agent_b = build_cli_agent(b, seed=seed + 1, settings=settings)
    n_games = games + games % 2
    with Progress(
        TextColumn("match"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        transient=True, console=Console(stderr=True),
    ) as progress:  # fmt: skip
        task = progress.add_task("decisions", total=n_games * 45)  # ~45 decisions per game
        result = play_match(
            agent_a, agent_b, games, seed, progress=lambda n: progress.advance(task, n)
        )
    s = result.summary
    record = {"a": a, "b": b, "seed": seed, **s.to_dict()}
    if json_out:
        typer.echo(json.dumps(record))
        return
    typer.echo(
        f"{a} vs {b}: {s.games} games ({s.pairs} side-swapped pairs), seed {seed}\n"
        f"  a_win_rate   {s.a_win_rate:.4f} ± {se_text(s.a_win_rate_se, 4)}  "
        f"(wins {s.a_wins}, draws {s.draws}, losses {s.b_wins})\n"
        f"  mean score   {a}: {s.a_score_mean:.2f}   {b}: {s.b_score_mean:.2f}\n"
        f"  paired diff  {s.score_diff_mean:+.2f} ± {se_text(s.score_diff_se, 2)} points per game"
    )
