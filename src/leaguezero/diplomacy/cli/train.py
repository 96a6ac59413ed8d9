"""``leaguezero diplomacy train`` and ``train-report``: the league GRPO loop from the command line
(read or resume the run's config, build the trainer, run it with progress, print the summary);
``pretrain-policy``: imitation of a bot before GRPO (:mod:`leaguezero.diplomacy.train.imitation`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail, sigterm_as_interrupt
from leaguezero.diplomacy.cli.common import ConfigOpt, SetOpt, load_diplomacy_config
from leaguezero.diplomacy.game.catalogue import BOTS_STRONGEST_FIRST

app = typer.Typer()  # mounted flat by the diplomacy app


@app.command("train")
def train_cmd(
    out: Annotated[
        Path, typer.Option("--out", help="Run directory (created; reused by --resume).")
    ],
    config: ConfigOpt = None,
    set_: SetOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in --out from its last step.")
    ] = False,
    init_from: Annotated[
        str | None,
        typer.Option(
            "--init-from",
            help="Start a new run from a saved agent: a policy checkpoint (train.agent=policy), "
            "an adapter folder (train.agent=llm), a run folder (its newest checkpoint) or "
            "'pretrained'; it is also the KL reference, and RUN/lineage.json records it.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    backend: Annotated[
        str | None,
        typer.Option(
            help="local | ray: play rollouts and evaluations as Ray tasks (sets run.backend)."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster (host:port; default RAY_ADDRESS or local; sets run.ray_address)."
        ),
    ] = None,
) -> None:
    """League training of the small CPU policy with GRPO (docs/guides/diplomacy_training.md).

    --resume continues the run in --out with its own config.yaml (plus any --set, e.g.
    --set train.steps=600 to extend a finished run), as `yz run --resume` does. --init-from
    starts a new run from a saved agent (training accumulates across sessions), as
    `yz run --init-from` does.
    """
    if init_from is not None and resume:
        raise fail("--init-from starts a new run; a resumed run keeps its weights (drop one)")
    cfg = read_train_config(
        out, config, set_, resume=resume, backend=backend, ray_address=ray_address
    )
    _train(cfg, out, resume=resume, init_from=init_from, quiet=quiet)


def _train(cfg, out: Path, *, resume: bool, init_from: str | None, quiet: bool) -> None:
    """``diplomacy train`` from its parsed options: build the trainer, run it with progress
    and print its summary as one JSON line; every error a user can meet is one line."""
    try:
        from leaguezero.diplomacy.train.loop import TrainError
    except ImportError as err:  # the optional engine is missing
        raise fail(str(err)) from None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from leaguezero.common.events import CorruptLogError
    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.distributed.runtime import RayUnavailableError
    from leaguezero.league.matchlog import MatchLogError
    from leaguezero.league.registry import RegistryError

    # A damaged league.json, match log or event log of the run is one line naming the file, as
    # in `leaguezero league show` (the three error types carry the path).
    damaged = (RegistryError, MatchLogError, CorruptLogError)
    try:
        trainer = make_trainer(cfg, out, resume=resume, init_from=init_from)
    except (TrainError, RayUnavailableError, *damaged) as err:
        raise fail(str(err)) from None
    if trainer.hero.memory_plan is not None and not cfg.train.records_per_pass and not quiet:
        typer.echo(trainer.hero.memory_plan, err=True)
    columns = (
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    terminal = sys.stderr.isatty()
    with Progress(*columns, disable=quiet or not terminal) as progress:
        task = progress.add_task("", total=cfg.train.steps, completed=trainer.step)
        on_step = _step_reporter(progress, task, cfg.train.steps, quiet=quiet, terminal=terminal)
        try:
            with sigterm_as_interrupt():  # `kill` stops as Ctrl-C does
                summary = trainer.run(on_step=on_step)
        except (*damaged, LLMError) as err:  # a server that refused a request: one line
            raise fail(str(err)) from None
        except KeyboardInterrupt:
            raise fail(
                f"interrupted; the {trainer.saved_step} finished steps are kept: continue "
                f"with  leaguezero diplomacy train --out {out} --resume",
                code=130,
            ) from None
    typer.echo(json.dumps(summary))


def _step_reporter(progress, task, steps: int, *, quiet: bool, terminal: bool):
    """The trainer's ``on_step``: the bar's description on a terminal, one plain line a step
    otherwise (a log file or a pipe), a step's warning on stderr; nothing but the bar with
    ``--quiet`` (the event log still has it all)."""

    def on_step(record: dict) -> None:
        if record.get("warning") and not quiet:  # --quiet: the event log still has it
            typer.echo(f"warning: {record['warning']}", err=True)
        if "exploiter" in record:  # an exploiter's step (league.exploiters)
            if not terminal and not quiet:
                typer.echo(_exploiter_step_line(record, steps), err=True)
            progress.update(task, completed=record["step"])
            return
        if not terminal and not quiet:  # a log file or a pipe: one plain line a step
            typer.echo(
                f"train: step {record['step']}/{steps} score "
                f"{record['score_mean']:.2f} records {record['records']:.0f} kl "
                f"{record['kl']:.4f} ratio {record['ratio_mean']:.3f} clip "
                f"{record['clip_fraction']:.2f} {record['seconds']:.1f}s/step",
                err=True,
            )
        progress.update(
            task,
            completed=record["step"],
            description=(
                f"score {record['score_mean']:.2f}  hero elo {record['hero_elo']:.0f}  "
                f"clip {record['clip_fraction']:.2f}  {record['seconds']:.1f}s/step"
            ),
        )

    return on_step


def _exploiter_step_line(record: dict, steps: int) -> str:
    """The plain progress line of an exploiter's step (league.exploiters)."""
    return (
        f"train: step {record['step']}/{steps} {record['exploiter']} "
        f"(generation {record['generation']}) win share "
        f"{record['win_share']:.2f} (last games {record['window_win_share']:.2f})"
        f" kl {record['kl']:.4f} {record['seconds']:.1f}s/step"
        + (f" -> {record['snapshot']}" if record["snapshot"] else "")
    )


def read_train_config(
    out: Path,
    config: Path | None,
    overrides: list[str] | None,
    *,
    resume: bool,
    backend: str | None = None,
    ray_address: str | None = None,
):
    """The config of ``diplomacy train``, read as ``yz run`` reads its own: a new run takes
    ``--config`` (or the defaults) and refuses a non-empty ``--out``; ``--resume`` takes the
    run's own ``config.yaml`` and refuses ``--config``. ``--backend``/``--ray-address`` become
    ``run.backend``/``run.ray_address`` overrides, so the saved config records them."""
    overrides = list(overrides or [])
    if backend is not None:
        overrides.append(f"run.backend={backend}")
    if ray_address is not None:
        overrides.append(f"run.ray_address={ray_address}")
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise fail(f"{out} is not empty: pass --resume to continue it, or choose a new --out")
        return load_diplomacy_config(config, overrides)
    if not (out / "config.yaml").exists():
        raise fail(f"--resume: {out} holds no run (no config.yaml); drop --resume to start one")
    if config is not None:
        raise fail("--resume uses the run's own config.yaml; change it with --set instead")
    return load_diplomacy_config(out / "config.yaml", overrides)


def make_trainer(
    cfg,
    out: Path,
    *,
    resume: bool = False,
    backend: str | None = None,
    ray_address=None,
    init_from: str | None = None,
):
    """The Diplomacy league trainer with its backends (``run.backend``): this process
    (``local``), or the network hero's games and the evaluator's jobs as Ray tasks (``ray``,
    docs/guides/cluster.md). ``backend``/``ray_address`` given here replace the config's;
    ``init_from``: the saved agent a new run starts from (``--init-from``).

    The one place that chooses a backend; raises ``TrainError`` for an unknown backend or an
    LLM hero on Ray without a server (``llm.backend: hf``), ``RayUnavailableError`` when Ray
    cannot be reached.
    """
    import torch

    from leaguezero.diplomacy.train.loop import LeagueTrainer, TrainError

    run = {"backend": backend, "ray_address": ray_address}
    if any(v is not None for v in run.values()):
        run = {k: v for k, v in run.items() if v is not None}
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update=run)})
    backend, ray_address = cfg.run.backend, cfg.run.ray_address
    # default one core per process (docs/reference/design.md#one-torch-thread-per-process)
    torch.set_num_threads(cfg.run.threads)
    if backend == "local":
        return LeagueTrainer(cfg, out, resume=resume, init_from=init_from)
    if backend != "ray":
        raise TrainError(f"backend {backend!r}: use 'local' or 'ray'")
    if cfg.train.hero.llm and not cfg.llm.sampling.shared_server:
        raise TrainError(
            "train.agent=llm on Ray needs llm.backend=openai: the workers sample from one "
            "server (vLLM or leaguezero llm serve) that every node can reach"
        )
    from leaguezero.distributed.evaluator import RayJobRunner
    from leaguezero.distributed.tasks import RayTaskMap

    return LeagueTrainer(
        cfg,
        out,
        resume=resume,
        init_from=init_from,
        task_map=RayTaskMap(ray_address),
        eval_runner=RayJobRunner(ray_address),
    )


_GROUP_NAMES = {"self": "itself", "checkpoints": "its checkpoints"}


def _pfsp_verdict(pfsp: dict, bucket: str) -> str:
    """``bucket ok`` within the tolerance, else how far over or under its target (in SE)."""
    if pfsp["within_tolerance"][bucket]:
        return f"{bucket} ok"
    off = pfsp["shares"][bucket] - pfsp["targets"][bucket]
    se = pfsp["se"][bucket]
    sizes = f" ({abs(off) / se:.1f} SE)" if se else ""
    return f"{bucket} {100 * abs(off):.1f} {'over' if off > 0 else 'under'}{sizes}"


def _pfsp_lines(pfsp: dict) -> list[str]:
    """The PFSP shares ± SE, each against its target's tolerance, and whom the draws seated."""
    if not pfsp["draws"]:
        return [f"PFSP from step {pfsp['from_step']}: no draws"]
    shares = "  ".join(
        f"{b} {100 * v:.1f}% ± {100 * pfsp['se'][b]:.1f}" for b, v in pfsp["shares"].items()
    )
    targets = "/".join(f"{100 * t:.0f}" for t in pfsp["targets"].values())
    verdicts = ", ".join(_pfsp_verdict(pfsp, b) for b in pfsp["shares"])
    opponents = "  ".join(
        f"{_GROUP_NAMES.get(g, g)} {100 * v:.1f}%" for g, v in pfsp["opponents"].items()
    )
    return [
        f"PFSP from step {pfsp['from_step']} ({pfsp['draws']} draws): {shares}",
        f"  against {targets} ± {100 * pfsp['tolerance']:.0f}: {verdicts}"
        f" (max deviation {pfsp['max_abs_deviation_points']:.1f} points)",
        f"  opponents drawn: {opponents}",
    ]


@app.command("train-report")
def train_report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A 'diplomacy train' run directory.")],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the whole summary as JSON.")
    ] = False,
    from_step: Annotated[
        int | None,
        typer.Option(
            "--from-step",
            min=1,
            help="Count PFSP draws from this step on (default: the end of cold start), e.g. "
            "the step a rule changed.",
        ),
    ] = None,
) -> None:
    """Curves and checks of a training run: PFSP shares (± SE, against the targets' ±3
    points) and whom the draws seated, ratings vs baselines (and relative to base_model = 0,
    in brackets), win rate vs random_bot, each evaluation's benchmark-suite win rates; writes
    training_summary.json and training.png into the run."""
    from leaguezero.common.config import ConfigError
    from leaguezero.diplomacy.train.report import write_report

    try:
        summary = write_report(run_dir, from_step)
    except (FileNotFoundError, ConfigError) as err:
        raise fail(str(err)) from None
    except ValueError as err:  # a damaged events.ndjson / match log line: the reader names it
        raise fail(str(err).splitlines()[0]) from None
    if json_out:
        typer.echo(json.dumps(summary))
        return
    from leaguezero.diplomacy.train.lineage import lineage_line

    started = lineage_line(summary.get("lineage"))
    if started is not None:
        typer.echo(started)
    hours = summary["hours"]
    cpu = "" if hours["cpu"] is None else f", {hours['cpu']:.2f} CPU h ({hours['cpu_steps']} steps)"
    typer.echo(f"steps: {len(summary['steps'])} in {hours['wall']:.2f} h{cpu}")
    for line in _pfsp_lines(summary["pfsp"]):
        typer.echo(line)
    for e in summary["evaluations"]:
        relative = e.get("baselines_relative") or {}
        base = ", ".join(
            f"{k} {v:.0f}" + (f" [{relative[k]:+.0f}]" if k in relative else "")
            for k, v in e["baselines"].items()
        )
        win = e["random_bot_win_rate"]
        hero = "-" if e["hero_elo"] is None else f"{e['hero_elo']:.0f}"
        if e.get("hero_elo_relative") is not None:
            hero += f" [{e['hero_elo_relative']:+.0f} vs {e['relative_to']}]"
        typer.echo(
            f"  step {e['step']:5d}  {e['challenger']}  elo {hero}  ({base})"
            f"  {'above' if e['above_baselines'] else 'BELOW'} baselines"
            + (f"  win vs random_bot {win:.2f}" if win is not None else "")
        )
        if e.get("suite"):
            typer.echo(f"        suite (informational): {_suite_line(e['suite'])}")
    typer.echo(f"evaluator failures/errors: {len(summary['errors'])}")
    memory = summary.get("memory")
    if memory is not None:
        typer.echo(
            f"trainer RSS: {memory['rss_mb_start']:.0f} MiB at step {memory['from_step']} -> "
            f"{memory['rss_mb_end']:.0f} MiB at step {memory['to_step']} "
            f"({memory['growth_mb']:+.0f} MiB; slope {memory['slope_mb_per_1000_steps']:+.1f} "
            f"MiB per 1,000 steps; max {memory['rss_mb_max']:.0f})"
        )


def _suite_line(rows: list[dict]) -> str:
    """One evaluation's benchmark-suite rows as ``agent win/floor ok|low`` (``-``: no games)."""
    cells = []
    for row in rows:
        if row["win_rate"] is None:
            cells.append(f"{row['agent']} -")
        else:
            mark = "ok" if row["passed"] else "low"
            cells.append(f"{row['agent']} {row['win_rate']:.2f}/{row['floor']:.2f} {mark}")
    return "  ".join(cells)


@app.command("pretrain-policy")
def pretrain_policy_cmd(
    out: Annotated[Path, typer.Option("--out", help="The policy checkpoint to write (*.pt).")],
    teacher: Annotated[str, typer.Option(help="The bot whose orders are learned.")] = "dumb_bot",
    games: Annotated[int, typer.Option(help="Bot games whose teacher seats are the corpus.")] = 200,
    max_years: Annotated[int, typer.Option(help="Years per corpus game.")] = 4,
    seats: Annotated[
        str, typer.Option(help="Comma-separated bots drawn for each seat of a corpus game.")
    ] = ",".join(BOTS_STRONGEST_FIRST),
    epochs: Annotated[int, typer.Option(help="Passes over the corpus.")] = 10,
    batch: Annotated[int, typer.Option(help="Choices per minibatch.")] = 128,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    hidden: Annotated[int, typer.Option(help="Network width (model.hidden).")] = 64,
    layers: Annotated[int, typer.Option(help="Graph layers (model.layers).")] = 2,
    attention: Annotated[
        int, typer.Option(help="Heads of attention over locations (model.attention; 0: none).")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the games, the batches and the weights.")] = 0,
    threads: Annotated[
        int, typer.Option(help="torch threads (1: one core; 0: torch's default, every core).")
    ] = 1,
    val_games: Annotated[
        int, typer.Option(help="Separate games whose choices measure held-out accuracy.")
    ] = 20,
    decoder: Annotated[
        str,
        typer.Option(
            help="independent (each unit's order from the board) or sequential (each given "
            "the orders decoded before it; teacher-forced)."
        ),
    ] = "independent",
    value_coef: Annotated[
        float,
        typer.Option(
            help="Weight of a value head's MSE on the games' final score shares (0: no value "
            "head); its held-out calibration goes into the report."
        ),
    ] = 0.0,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
) -> None:
    """Pretrain the CPU policy network to imitate a bot (imitation first, then GRPO).

    Plays bot games, records every choice the teacher's seats make as the policy network
    represents it (a unit's legal orders, the index of the teacher's), trains by cross-entropy
    and saves a policy checkpoint that `diplomacy eval --hero` plays and `diplomacy train
    --init-from` starts from, with a JSON report beside it (docs/guides/diplomacy_training.md).
    """
    try:
        from leaguezero.diplomacy.train.imitation import PolicyImitationSettings, pretrain_policy
    except ImportError as err:  # the optional engine is missing
        raise fail(str(err)) from None

    settings = PolicyImitationSettings(
        teacher=teacher.strip(),
        games=games,
        max_years=max_years,
        seat_bots=tuple(b.strip() for b in seats.split(",") if b.strip()),
        epochs=epochs,
        batch=batch,
        lr=lr,
        hidden=hidden,
        layers=layers,
        attention=attention,
        seed=seed,
        threads=threads,
        val_games=val_games,
        decoder=decoder.strip(),
        value_coef=value_coef,
    )
    try:
        report = pretrain_policy(
            out, settings, log=lambda line: typer.echo(line, err=True), overwrite=force
        )
    except (FileExistsError, ValueError) as err:
        raise fail(str(err)) from None
    typer.echo(json.dumps(_pretrain_summary(out, report)))


def _pretrain_summary(out: Path, report: dict) -> dict:
    """The one JSON line ``pretrain-policy`` prints: where it wrote, held-out accuracy, losses,
    the value head's calibration (null without one), corpus size and speed, seconds."""
    return {
        "out": str(out),
        "report": str(out.with_suffix(".json")),
        "val_accuracy": report["val_accuracy"],
        "train_loss": report["train_loss"],
        "val_loss": report["val_loss"],
        "val_value": report["val_value"]
        and {k: report["val_value"][k] for k in ("mse", "baseline_mse", "r2")},
        "choices": report["corpus"]["train"]["choices"],
        "games_per_second": report["corpus"]["train"]["games_per_second"],
        "seconds": report["seconds"]["total"],
    }
