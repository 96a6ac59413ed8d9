"""``yz run`` (the main job) and its pieces as separate commands: ``selfplay``, ``train``,
``gate`` and ``oracle-eval`` (docs/guides/alphazero.md#the-pieces-by-hand); ``play`` lives in
:mod:`leaguezero.yatzy.cli.play`.

``yz run`` reads config -> prepares -> loops -> sums up: the four steps are in
:mod:`leaguezero.yatzy.cli.job`; the pieces call the loop's phase functions
(:mod:`leaguezero.yatzy.train.loop`)."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.yatzy.cli.common import (
    CHECKPOINT_NAMES,
    ConfigOpt,
    SetOpt,
    build_cli_agent,
    load_oracle_with_notice,
    load_yatzy_config,
    search_settings,
    setup_threads,
)
from leaguezero.yatzy.search.settings import SearchSettings

app = typer.Typer()  # mounted flat by the yz app

OutOpt = Annotated[Path, typer.Option("--out", help="Run directory (created if new).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


@contextmanager
def _progress(enabled: bool = True):
    """A rich progress display and a reporter ``(phase, advance, total)`` for it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), transient=True, disable=not enabled,
    )  # fmt: skip
    tasks: dict[str, int] = {}

    def report(phase: str, advance: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total or None)
        elif total:  # a size only: never reset what is done (self-play passes it every game)
            progress.update(tasks[phase], total=total)
        if advance:
            progress.advance(tasks[phase], advance)

    with progress:
        yield report, progress


@app.command("run")
def run(
    config: ConfigOpt = None,
    out: OutOpt = Path("runs/yatzy"),
    set_: SetOpt = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --out where it stopped.")
    ] = False,
    oracle_table: Annotated[Path | None, typer.Option(help="Oracle table file.")] = None,
    league: Annotated[
        bool,
        typer.Option(
            "--league",
            help="League training: the hero plays PFSP-sampled opponents, checkpoints join "
            "RUN/league.json and are rated in the background (sets league.enabled=true).",
        ),
    ] = False,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="local | ray: where self-play workers and the trainer run (sets run.backend; "
            "docs/guides/cluster.md).",
        ),
    ] = None,
    init_from: Annotated[
        str | None,
        typer.Option(
            "--init-from",
            help="Start a new run from a trained network instead of a random one: pretrained, "
            "or a checkpoint path (its shape sets the model section; RUN/lineage.json records it).",
        ),
    ] = None,
) -> None:
    """The AlphaZero loop: self-play -> train -> gate -> oracle eval -> promote, per iteration."""
    from leaguezero.yatzy.cli import job

    cfg, init_path = job.read_config(
        out, config, set_, resume=resume, league=league, backend=backend, init_from=init_from
    )
    prepared = job.prepare(out, cfg, resume=resume, init_path=init_path, oracle_table=oracle_table)
    if prepared is None:  # every iteration is done
        return
    job.loop(prepared)
    job.summary(prepared)


@app.command("selfplay")
def selfplay(
    out: OutOpt,
    best: Annotated[
        Path | None, typer.Option(help="Checkpoint to play with (needed for --infer local).")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    infer: Annotated[
        str | None, typer.Option(help="local | unix:///path | tcp://host:port")
    ] = None,
    games: Annotated[int | None, typer.Option(help="Games (default: config).")] = None,
    seed: Annotated[int, typer.Option(help="Self-play seed.")] = 0,
    worker: Annotated[int, typer.Option(help="Worker id (names its shards).")] = 0,
) -> None:
    """Self-play games into replay shards under OUT/replay/iter_0000 (resumable)."""
    from leaguezero.common.config import write_resolved_config
    from leaguezero.common.events import EventWriter
    from leaguezero.yatzy.train.kinds import selfplay_function
    from leaguezero.yatzy.train.selfplay.positions import make_selfplay_evaluator

    cfg = load_yatzy_config(
        config, [*(set_ or []), *([f"selfplay.infer={infer}"] if infer else [])]
    )
    setup_threads(cfg)
    if cfg.selfplay.infer == "local" and (best is None or not best.is_file()):
        raise fail(f"--best {best} does not exist (local inference needs a checkpoint)")
    out.mkdir(parents=True, exist_ok=True)
    write_resolved_config(cfg, out)
    settings = SearchSettings.from_config(cfg)  # the command's search, built once
    evaluator = make_selfplay_evaluator(cfg, settings, best)
    n = games or cfg.selfplay.games_per_iteration
    with _progress(sys.stderr.isatty()) as (report, _):
        stats = selfplay_function(cfg.search.kind)(
            cfg, evaluator, out / "replay" / "iter_0000", settings=settings, games=n, seed=seed,
            worker=worker,
            roots_log=EventWriter(out / "logs" / "mcts_roots.ndjson"),
            progress=lambda k: report("selfplay", k, n),
        )  # fmt: skip
    EventWriter(out / "logs" / "iteration_stats.ndjson").emit("selfplay", **stats.to_dict())
    typer.echo(json.dumps(stats.to_dict()))


@app.command("train")
def train(
    replay: Annotated[Path, typer.Option(help="Replay folder (with iter_NNNN subfolders).")],
    best: Annotated[Path, typer.Option(help="Best checkpoint: the candidate starts from it.")],
    out: Annotated[Path, typer.Option(help="Candidate checkpoint to write.")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Train a candidate from the best net on the replay window (fresh optimizer)."""
    from leaguezero.az.checkpoint import CheckpointError, save_checkpoint
    from leaguezero.az.replay import ReplayError
    from leaguezero.az.train import TrainError
    from leaguezero.yatzy.net.schema import checkpoint_schema
    from leaguezero.yatzy.train.loop import train_from

    cfg = load_yatzy_config(config, set_)
    setup_threads(cfg)
    with _progress(sys.stderr.isatty()) as (report, _):
        try:  # the newest replay iteration's window, seeded with run.seed
            model, meta, window, rep = train_from(cfg, best, replay, None, cfg.run.seed, report)
        except (CheckpointError, ReplayError, TrainError) as err:
            raise fail(str(err)) from None
    schema = checkpoint_schema(cfg.search.kind)
    save_checkpoint(out, model, kind=model.kind, kwargs=model.kwargs(), schema=schema,
                    train_step=meta.train_step + cfg.train.steps)  # fmt: skip
    typer.echo(json.dumps({"candidate": str(out), "window": window, **rep.__dict__}))


@app.command("gate")
def gate(
    best: Annotated[Path, typer.Option(help="Best checkpoint.")],
    cand: Annotated[Path, typer.Option(help="Candidate checkpoint.")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    seed_sets: Annotated[Path, typer.Option(help="Folder of persisted seed sets.")] = Path(
        "seedsets"
    ),
    json_out: JsonOpt = False,
) -> None:
    """Paired, side-swapped gating of a candidate against the best, with an SPRT."""
    from leaguezero.az.checkpoint import CheckpointError
    from leaguezero.yatzy.agents.model import load_yatzy_model
    from leaguezero.yatzy.train.loop import gate_phase

    cfg = load_yatzy_config(config, set_)
    settings = SearchSettings.from_config(cfg)  # the command's search, built once
    setup_threads(cfg)
    try:
        for path in (best, cand):  # the config's search kind, as `yz train` checks
            load_yatzy_model(path, cfg.run.device, kind=cfg.search.kind)
    except (FileNotFoundError, CheckpointError, ValueError) as err:
        raise fail(str(err)) from None
    with _progress(sys.stderr.isatty() and not json_out) as (report, _):
        try:
            result = gate_phase(cfg, settings, cand, best, seed_sets, report)
        except (FileNotFoundError, CheckpointError, ValueError) as err:  # SeedSetError too
            raise fail(str(err)) from None
    out = result.to_dict()
    if json_out:
        typer.echo(json.dumps(out))
        return
    s = result.summary
    typer.echo(
        f"candidate win rate {s.a_win_rate:.4f} ± {s.a_win_rate_se:.4f} over {s.games} games; "
        f"score diff {s.score_diff_mean:+.2f} ± {s.score_diff_se:.2f}; SPRT llr "
        f"{result.sprt.llr:.2f} in [{result.sprt.lower:.2f}, {result.sprt.upper:.2f}] -> "
        f"{'PROMOTE' if result.promote else 'keep best'} ({result.reason})"
    )


@app.command("oracle-eval")
def oracle_eval(
    best: Annotated[str, typer.Option(help=f"Best checkpoint: {CHECKPOINT_NAMES}.")],
    cand: Annotated[str | None, typer.Option(help=f"Candidate: {CHECKPOINT_NAMES}.")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    seed: Annotated[int, typer.Option(help="Evaluation seed.")] = 0,
    oracle_table: Annotated[Path | None, typer.Option(help="Oracle table file.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Solitaire stats and oracle regret for the oracle, best and candidate."""
    from leaguezero.yatzy.agents.oracle import OracleAgent
    from leaguezero.yatzy.train.loop import guardrail_ok, solitaire_phase

    cfg = load_yatzy_config(config, set_)
    setup_threads(cfg)
    oracle = load_oracle_with_notice(oracle_table)
    games = cfg.oracle_eval.games or 100
    settings = search_settings(cfg, cfg.oracle_eval.sims)
    agents = {"oracle": OracleAgent(oracle=oracle)}
    agents["best"] = build_cli_agent(best, settings, checkpoint=True)
    if cand is not None:
        agents["candidate"] = build_cli_agent(cand, settings, checkpoint=True)
    results: dict = solitaire_phase(agents, oracle, games, seed, lambda *_: None)
    for res in results.values():
        res.pop("scores")
    delta = cfg.oracle_eval.guardrail_delta
    if (ok := guardrail_ok(cfg, results)) is not None:
        results["guardrail_ok"] = ok
    if json_out:
        typer.echo(json.dumps(results))
        return
    typer.echo(
        f"{'agent':<10}{'boards':>7}{'mean ± SE':>15}{'median':>8}{'std':>7}{'bonus':>7}"
        f"{'match':>7}{'regret/g':>9}"
    )
    for name, r in results.items():
        if isinstance(r, dict):
            typer.echo(
                f"{name:<10}{r['boards']:>7}{r['mean']:>9.1f} ± {r['se']:<4.1f}"
                f"{r['median']:>8.0f}{r['std']:>7.1f}"
                f"{r['bonus_rate']:>7.2f}{r['oracle_match_rate']:>7.3f}"
                f"{r['mean_regret_per_game']:>9.1f}"
            )
    if "guardrail_ok" in results:
        typer.echo(f"guardrail (delta {delta}): {'ok' if results['guardrail_ok'] else 'FAILED'}")


profile_app = typer.Typer(help="Profile self-play (cProfile + torch.profiler).")
app.add_typer(profile_app, name="profile")


@profile_app.command("selfplay")
def profile_selfplay_cmd(
    out: OutOpt,
    best: Annotated[Path | None, typer.Option(help="Checkpoint (default: a fresh net).")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    games: Annotated[int, typer.Option(help="Games to profile.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
) -> None:
    """Run self-play under the profilers and write the reports into OUT/profile."""
    from leaguezero.az.checkpoint import CheckpointError
    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.yatzy.agents.model import load_yatzy_model
    from leaguezero.yatzy.net.schema import build_network, feature_schema_id
    from leaguezero.yatzy.train.profiling import profile_selfplay

    cfg = load_yatzy_config(config, set_)
    setup_threads(cfg)
    if out.exists() and not out.is_dir():
        raise fail(f"--out {out} is a file; give a run directory")
    if best is not None:
        if not best.is_file():
            raise fail(f"--best {best} does not exist")
        try:
            model, _ = load_yatzy_model(best, cfg.run.device, kind=cfg.search.kind)
        except CheckpointError as err:
            raise fail(str(err)) from None
    else:
        model = build_network(cfg)
    evaluator = TorchEvaluator(
        model, feature_schema_id(cfg.search.kind), cfg.run.device,
        margin_weight=cfg.mcts.margin_utility,
    )  # fmt: skip
    summary = profile_selfplay(
        cfg, SearchSettings.from_config(cfg), evaluator, out / "profile", games, seed
    )
    typer.echo(
        f"{summary['games']} games, {summary['sims_per_s']:,.0f} sims/s; network "
        f"{100 * summary['network_share']:.0f}% of wall time, search and the rest "
        f"{100 * summary['search_share']:.0f}%. Reports: {out / 'profile'}"
    )


@app.command("init-model")
def init_model(
    out: Annotated[Path, typer.Option("--out", help="Checkpoint file to write.")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
) -> None:
    """Write a freshly initialised YatzyNet checkpoint (the start of a hand-run workflow)."""
    from leaguezero.az.checkpoint import save_checkpoint
    from leaguezero.yatzy.net.schema import build_network, checkpoint_schema

    cfg = load_yatzy_config(config, set_)
    try:
        net = build_network(cfg, seed)
    except ValueError as err:
        raise fail(str(err)) from None
    schema = checkpoint_schema(cfg.search.kind)
    save_checkpoint(out, net, kind=net.kind, kwargs=net.kwargs(), schema=schema)
    typer.echo(f"wrote {out}")
