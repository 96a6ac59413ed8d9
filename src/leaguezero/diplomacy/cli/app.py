"""``leaguezero diplomacy``: tournaments (``eval``, ``bench``), single games (``play``) and the
config; training (``train``, ``train-report``) is in :mod:`leaguezero.diplomacy.cli.train`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.common.progress import UnitProgress
from leaguezero.diplomacy.cli.common import (
    ConfigOpt,
    ResultsOpt,
    SetOpt,
    ThreadsOpt,
    command_agents,
    load_diplomacy_config,
    use_threads,
)
from leaguezero.diplomacy.cli.exploit import app as exploit_app
from leaguezero.diplomacy.cli.results_file import GameResults, check_appendable
from leaguezero.diplomacy.cli.tables import print_bench_report, print_eval_report
from leaguezero.diplomacy.cli.train import app as train_app

app = typer.Typer(
    name="diplomacy",
    help="7-player no-press Diplomacy: bots, rollouts and hero-versus-field tournaments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Configs: show the resolved config.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(train_app)  # train, train-report: mounted flat
app.add_typer(exploit_app)  # exploit: mounted flat


@config_app.command("show")
def config_show(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Print the resolved config (file + overrides + defaults) as YAML."""
    from leaguezero.common.config import config_to_yaml

    typer.echo(config_to_yaml(load_diplomacy_config(config, set_)), nl=False)


CONFIG_HEADER = """No-press Diplomacy on a local CPU (2 cores): bots, rollouts and tournaments.
leaguezero diplomacy eval --config configs/diplomacy_local_cpu.yaml --hero greedy_bot \\
    --opponents random_bot --games 14
Regenerate: leaguezero diplomacy config write configs/diplomacy_local_cpu.yaml"""


@config_app.command("write")
def config_write(
    path: Annotated[Path, typer.Argument(help="Where to write the commented YAML.")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write the resolved config as YAML with every key commented (atomically)."""
    from leaguezero.common.atomic import atomic_write_text
    from leaguezero.common.config import commented_yaml

    atomic_write_text(path, commented_yaml(load_diplomacy_config(config, set_), CONFIG_HEADER))
    typer.echo(str(path))


@app.command("eval")
def eval_cmd(
    hero: Annotated[str, typer.Option("--hero", help="The agent under test, e.g. greedy_bot.")],
    opponents: Annotated[
        str,
        typer.Option("--opponents", help="Comma-separated opponents, cloned over six seats."),
    ],
    games: Annotated[int, typer.Option("--games", min=1, help="Games to play.")] = 14,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Master seed (overrides config).")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    matchlog: Annotated[
        Path | None, typer.Option("--matchlog", help="Append each game to this league match log.")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out-dir", help="Save finished games here (default: config games_dir)."),
    ] = None,
    no_save: Annotated[bool, typer.Option("--no-save", help="Do not save the games.")] = False,
    per_game: Annotated[
        bool, typer.Option("--per-game", help="Keep the per-game list in the JSON.")
    ] = False,
    sample: Annotated[
        bool,
        typer.Option("--sample", help="Checkpoints sample their orders (default: most probable)."),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    rank: Annotated[
        bool,
        typer.Option("--rank", help="LLM agents score each unit's legal orders (ranking mode)."),
    ] = False,
    concurrent_games: Annotated[
        int,
        typer.Option(
            "--concurrent-games",
            min=1,
            max=16,
            help="Games played at once: their in-process LLM seats share one batch a phase (far "
            "less CPU a game; reproducible for a given N, but bf16 rounds by batch, so a near "
            "tie may go otherwise than at N=1; docs/guides/llm.md).",
        ),
    ] = 1,
    threads: ThreadsOpt = None,
    results: ResultsOpt = None,
) -> None:
    """Hero against six opponent seats, powers rotated; win rates, scores and Elo changes.

    Agents: bots, policy checkpoints (*.pt), LLM folders (a base model built by `leaguezero
    llm pretrain`, or an adapter folder on `--set llm.base_model=PATH`), and the shipped
    `pretrained` (policy network) and `pretrained-llm` when they ship.

    A seat wins a game when its final score is the single highest (a k-way tie shares: 1/k).
    """
    run_tournament = _tournament_runner()
    cfg = use_threads(load_diplomacy_config(config, _eval_overrides(set_, seed, no_save)), threads)
    specs, resolver, cfg = _eval_agents(hero, opponents, cfg, sample=sample, rank=rank)
    check_appendable("--matchlog", matchlog)  # a link or FIFO: refused before the games
    with GameResults(results) as log:
        result = _play_eval(
            run_tournament,
            cfg,
            specs,
            resolver,
            log,
            label=f"eval {hero} vs {opponents}",
            games=games,
            matchlog=matchlog,
            save_dir=None if no_save else out_dir,
            concurrent_games=concurrent_games,
        )
    _print_eval(result.report(), per_game=per_game, json_out=json_out)
    log.finish()  # lines --results could not take: on stderr, status 1


def _tournament_runner():
    """:func:`~leaguezero.diplomacy.game.tournament.run_tournament`, or one line when the
    optional engine is missing."""
    try:
        from leaguezero.diplomacy.game.tournament import run_tournament
    except ImportError as err:  # the optional engine is missing: one line, not a traceback
        raise fail(str(err)) from None
    return run_tournament


def _play_eval(run_tournament, cfg, specs, resolver, log, *, label: str, games: int, **options):
    """The tournament of ``specs[0]`` against ``specs[1:]``, each game written to ``log``
    (``--results``) as it ends; ``options``: ``run_tournament``'s other keywords."""
    # Progress goes to stderr (a long eval is minutes of LLM games), so --json's stdout stays
    # one JSON object: a bar on a terminal, otherwise a plain line every few seconds.
    with UnitProgress(label, games) as bar:

        def on_game(game) -> None:
            log.write(game)
            bar.advance(note=_game_note(game))

        return run_tournament(
            cfg, specs[0], specs[1:], games, on_game=on_game, resolver=resolver, **options
        )


def _eval_overrides(set_: list[str] | None, seed: int | None, no_save: bool) -> list[str]:
    """``--set`` plus what ``--seed`` and ``--no-save`` set in the config."""
    overrides = list(set_ or [])
    if seed is not None:
        overrides.append(f"run.seed={seed}")
    if no_save:
        overrides.append("games_dir=null")
    return overrides


def _eval_agents(hero: str, opponents: str, cfg, *, sample: bool, rank: bool):
    """The hero's and opponents' specs, their resolver and the config that seats them (as
    :func:`~.common.command_agents`); one line for an empty ``--opponents``."""
    opponent_names = [name.strip() for name in opponents.split(",") if name.strip()]
    if not opponent_names:
        raise fail("--opponents: give at least one agent, e.g. --opponents random_bot")
    specs, resolver, cfg = command_agents([hero, *opponent_names], cfg, sample=sample, rank=rank)
    warn_untaught_free_generation(specs, cfg, rank)
    return specs, resolver, cfg


def _print_eval(report: dict, *, per_game: bool, json_out: bool) -> None:
    """The tournament's report as one JSON object (``--json``) or tables."""
    if not per_game:
        report.pop("per_game")
    if json_out:
        typer.echo(json.dumps(report))
    else:
        print_eval_report(report)


def _game_note(game) -> str:
    """A few words on a finished game for the progress line."""
    hero = game.hero_power
    note = f"{hero} {game.centers[hero]} centres, {game.final_year}, {game.seconds:.0f} s"
    answers = game.llm_answers.get(hero)
    if answers:
        note += f", {answers['invalid']} invalid / {answers['missing']} missing LLM orders"
    return note


def warn_untaught_free_generation(specs, cfg, rank: bool) -> None:
    """One line on stderr when an LLM base model that was never taught the answer format
    (not built by ``llm pretrain``: a real instruct model, a .gguf file) plays free text:
    such a model writes no legal order and runs every answer to the token budget. ``specs``:
    the command's agents (:func:`~.common.command_agents`)."""
    from leaguezero.diplomacy.game.catalogue import AgentKind

    if rank or cfg.llm.mode != "generate":
        return
    for spec in specs:
        untaught = spec.kind is AgentKind.LLM_BASE and not (
            spec.path is not None and (spec.path / "leaguezero_base.json").is_file()
        )
        if untaught:
            typer.echo(
                f"warning: {spec.name} is a base model never taught the answer format and "
                "llm.mode is generate (free text): expect no legal orders and every answer cut "
                "at llm.max_new_tokens; add --set llm.mode=constrained",
                err=True,
            )


@app.command("bench")
def bench_cmd(
    hero: Annotated[str, typer.Option("--hero", help="The agent under test, e.g. dumb_bot.")],
    games: Annotated[
        int | None,
        typer.Option(
            "--games",
            min=1,
            help="Games per opponent (default: bench.games, 301: a 95% interval of ±0.057 at a "
            "win rate of 0.5, so an agent 0.06 from a floor gets a verdict).",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Master seed (overrides config).")
    ] = None,
    checkpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--checkpoint", help="A frozen agent to add to the suite (repeatable; floor 1/7)."
        ),
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    sample: Annotated[
        bool,
        typer.Option("--sample", help="Checkpoints sample their orders (default: most probable)."),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    threads: ThreadsOpt = None,
    results: ResultsOpt = None,
) -> None:
    """The fixed benchmark suite: the hero one-against-six against random_bot, chaos_bot,
    greedy_bot, dumb_bot and the frozen checkpoints of the config, seats rotated.

    One row per opponent: win rate ± SE and its 95% interval, mean score, mean supply centres,
    survival, the tier's floor and a verdict: pass or FAIL when the interval is wholly above or
    below the floor, inconclusive when it straddles it (docs/results/diplomacy_bench.md). Games are
    not saved.
    """
    try:
        from leaguezero.diplomacy.game.bench import bench_report, run_bench, suite_with_checkpoints
    except ImportError as err:  # the optional engine is missing: one line, not a traceback
        raise fail(str(err)) from None

    overrides = [*(set_ or []), "games_dir=null"]
    if seed is not None:
        overrides.append(f"run.seed={seed}")
    cfg = use_threads(load_diplomacy_config(config, overrides), threads)
    games = games or cfg.bench.games
    suite = suite_with_checkpoints([*cfg.bench.checkpoints, *(checkpoint or [])])
    names = [hero, *(entry.agent for entry in suite)]
    specs, resolver, cfg = command_agents(names, cfg, sample=sample)
    warn_untaught_free_generation(specs, cfg, False)
    agents = dict(zip(names, specs, strict=True))

    # On stderr: --json's stdout stays one object while a long run still shows progress.
    total = games * len(suite)
    with GameResults(results) as log, UnitProgress(f"bench {hero}", total) as bar:

        def on_game(agent: str, game) -> None:
            log.write(game, opponent=agent)
            bar.advance(note=f"vs six {agent}: {_game_note(game)}")

        rows = run_bench(
            cfg, agents[hero], suite, games, agents=agents, resolver=resolver, on_game=on_game
        )
    report = bench_report(hero, cfg.run.seed, games, rows)
    if json_out:
        typer.echo(json.dumps(report))
    else:
        print_bench_report(report, cfg.max_years)
    log.finish()


@app.command("play")
def play_cmd(
    agents: Annotated[
        str, typer.Option("--agents", help="Seven comma-separated agents, AUSTRIA..TURKEY order.")
    ],
    hero_power: Annotated[str, typer.Option("--hero-power", help="Power to record.")] = "FRANCE",
    seed: Annotated[
        int | None, typer.Option("--seed", help="Master seed (overrides config).")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", help="Save the game here (default: games_dir).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    threads: ThreadsOpt = None,
) -> None:
    """Play one game with the given agent on each power and save it."""
    from leaguezero.diplomacy.game.env import POWERS
    from leaguezero.diplomacy.game.rollout import run_rollout

    overrides = list(set_ or []) + ([f"run.seed={seed}"] if seed is not None else [])
    cfg = use_threads(load_diplomacy_config(config, overrides), threads)
    names = [name.strip() for name in agents.split(",")]
    if len(names) != len(POWERS):
        raise fail(f"--agents: give {len(POWERS)} agents ({', '.join(POWERS)}), got {len(names)}")
    specs, resolver, cfg = command_agents(names, cfg, sample=False)
    warn_untaught_free_generation(specs, cfg, False)
    if hero_power.upper() not in POWERS:
        raise fail(f"--hero-power: {hero_power!r} is not one of {', '.join(POWERS)}")
    result = run_rollout(
        cfg,
        0,
        0,
        dict(zip(POWERS, specs, strict=True)),
        hero_power.upper(),
        save_dir=out_dir,
        resolver=resolver,
    )
    summary = {k: v for k, v in result.to_dict().items() if k not in ("steps",)} | {
        "hero_steps": len(result.steps)
    }
    if json_out:
        typer.echo(json.dumps(summary))
        return
    for power in POWERS:
        typer.echo(
            f"{power:8s} {result.power_agents[power]:12s} centres {result.centers[power]:2d} "
            f"score {result.scores[power]:5.1f} sos {result.sos_scores[power]:.3f}"
        )
    typer.echo(f"ended by {result.ended_by} in {result.final_year}; saved {result.saved_game}")
    typer.echo(
        f"score: centres + 0.5 a unit, +{cfg.win_bonus:g} for a single leader with at least "
        f"{cfg.winner_threshold_sc} centres (the highest score wins the game); sos: "
        f"sum-of-squares, centres² / the sum over powers of centres² (1 for a solo, "
        f"{cfg.solo_sc} centres)"
    )
