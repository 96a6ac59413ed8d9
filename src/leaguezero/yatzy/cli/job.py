"""``yz run`` in four steps: :func:`read_config` -> :func:`prepare` -> :func:`loop` ->
:func:`summary`. The command (:func:`leaguezero.yatzy.cli.run.run`) only calls them in turn.

* ``read_config``: the config of a new run, or the run's own ``config.yaml`` on ``--resume``,
  after the checks that need nothing but the command line and the run directory;
* ``prepare``: torch threads, Ray (``run.backend: ray``), the run directory and its initial
  network, the oracle, the backend and the league: a :class:`RunJob`;
* ``loop``: the iterations under a progress display, with SIGTERM handled like Ctrl-C and the
  known failures of a run (a damaged shard, checkpoint, seed set or lineage file) as one line;
* ``summary``: the league's last evaluation and where the results are.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from leaguezero.common.cli import fail, sigterm_as_interrupt
from leaguezero.yatzy.cli.common import load_oracle_with_notice, load_yatzy_config, setup_threads
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.loop import Backend, RunDir


@dataclass
class RunJob:
    """What :func:`prepare` sets up for :func:`loop` and :func:`summary`: iterations ``start``
    to ``last`` of the run in ``out``."""

    out: Path
    cfg: YatzyConfig
    run_dir: RunDir
    start: int
    last: int
    oracle: object
    oracle_table: Path | None
    backend: Backend
    settings: SearchSettings  # the run's search, built once here and handed to every phase
    league: object | None = None  # a LeagueRun (league.enabled)


def read_config(
    out: Path,
    config: Path | None,
    overrides: list[str] | None,
    *,
    resume: bool,
    league: bool,
    backend: str | None,
    init_from: str | None,
) -> tuple[YatzyConfig, Path | None]:
    """(the run's config, the checkpoint ``--init-from`` names or None); the command-line
    switches ``--league`` and ``--backend`` become ``--set`` overrides."""
    from leaguezero.common.config import ConfigError, load_config

    run_dir = RunDir(out)
    if league:
        overrides = [*(overrides or []), "league.enabled=true"]
    if backend is not None:
        overrides = [*(overrides or []), f"run.backend={backend}"]
    init_path = _init_from_path(init_from) if init_from is not None else None
    if not resume:
        if run_dir.root.exists() and any(run_dir.root.iterdir()):
            raise fail(f"{out} is not empty: pass --resume to continue it, or choose a new --out")
        return load_yatzy_config(config, overrides), init_path
    if init_path is not None:
        raise fail("--init-from starts a new run; a resumed run keeps its own networks")
    if not (run_dir.root / "config.yaml").exists():
        raise fail(f"--resume: {out} holds no run (no config.yaml); drop --resume to start one")
    if config is not None:
        raise fail("--resume uses the run's own config.yaml; change it with --set instead")
    try:
        return load_config(YatzyConfig, run_dir.root / "config.yaml", overrides or []), None
    except ConfigError as err:
        raise fail(str(err)) from None


def prepare(
    out: Path,
    cfg: YatzyConfig,
    *,
    resume: bool,
    init_path: Path | None,
    oracle_table: Path | None,
) -> RunJob | None:
    """Set the run up (see the module docstring) and say what it will do; None when every
    iteration is already done."""
    from leaguezero.yatzy.cli.progress import expected_duration_line
    from leaguezero.yatzy.train.lineage import LineageError
    from leaguezero.yatzy.train.loop import init_run

    run_dir = RunDir(out)
    setup_threads(cfg)
    _start_ray(cfg)  # a missing extra fails before any work
    if resume:
        _check_run_state(run_dir)
    try:
        cfg = init_run(cfg, run_dir, init_from=init_path)
    except LineageError as err:
        raise fail(str(err)) from None
    oracle = load_oracle_with_notice(oracle_table)
    start = _check_run_state(run_dir) + 1
    job = RunJob(out, cfg, run_dir, start, cfg.run.iterations, oracle, oracle_table,
                 choose_backend(cfg.run.backend), SearchSettings.from_config(cfg))  # fmt: skip
    if job.start > job.last:
        typer.echo(f"{out}: all {job.last} iterations are done")
        return None
    typer.echo(f"run {out}: iterations {job.start}..{job.last} (config {out}/config.yaml)")
    typer.echo(expected_duration_line(cfg, job.last - job.start + 1))
    if cfg.league.enabled:
        job.league = _league_run(job)
    return job


def loop(job: RunJob) -> None:
    """Run iterations ``job.start..job.last`` with a progress display and one summary line per
    iteration. Ctrl-C or SIGTERM: exit 130 with how to resume; a damaged file: one line."""
    from leaguezero.az.checkpoint import CheckpointError
    from leaguezero.az.replay import ReplayError
    from leaguezero.az.train import TrainError
    from leaguezero.yatzy.cli.progress import (
        RunProgress,
        expected_iteration_seconds,
        sims_per_game,
    )
    from leaguezero.yatzy.train.evaluation.gate import SeedSetError
    from leaguezero.yatzy.train.lineage import LineageError

    idle_s, busy_s = expected_iteration_seconds(job.cfg)
    progress = RunProgress(
        job.last - job.start + 1, (idle_s + busy_s) / 2, terminal=sys.stderr.isatty(),
        stream=sys.stderr, sims_per_game=sims_per_game(job.cfg),
    )  # fmt: skip
    it = job.start
    try:
        with sigterm_as_interrupt(), progress.display():  # `kill` stops as Ctrl-C does
            for it in range(job.start, job.last + 1):
                _iteration(job, it, progress)
    except BaseException as err:
        if job.league is not None:  # stop a running evaluation; --resume submits it again
            job.league.close(timeout=0)
        if isinstance(err, KeyboardInterrupt):
            typer.echo(
                f"interrupted in iteration {it}; finished phases and complete shards are kept: "
                f"continue with  yz run --out {job.out} --resume",
                err=True,
            )
            raise typer.Exit(130) from None
        if isinstance(err, (ReplayError, CheckpointError, TrainError, SeedSetError, LineageError)):
            # a damaged shard, seed set or lineage file: one line naming it
            raise fail(f"iteration {it}: {err}") from None
        raise


def summary(job: RunJob) -> None:
    """Wait for the league's last evaluation and say where the results are."""
    out = job.out
    if job.league is not None:
        typer.echo("league: waiting for the last evaluation ...")
        job.league.close()
        typer.echo(f"league: {out}/league.json, {out}/league_matches.ndjson, {out}/league_elo.png")
    typer.echo(f"done: best model {job.run_dir.best}; logs in {job.run_dir.logs}")


def choose_backend(name: str) -> Backend:
    """The loop's :class:`~leaguezero.yatzy.train.loop.Backend` for ``run.backend``: the one
    place that decides between local processes and Ray."""
    if name == "ray":
        from leaguezero.yatzy.cli.ray_backend import ray_backend

        return ray_backend()
    from leaguezero.yatzy.train.loop import local_backend

    return local_backend()


def _iteration(job: RunJob, it: int, progress) -> None:
    """Run (or finish) iteration ``it`` and print its summary line above the progress display."""
    from leaguezero.az.replay import games_on_disk
    from leaguezero.yatzy.cli.progress import summary_text
    from leaguezero.yatzy.train.kinds import search_kind
    from leaguezero.yatzy.train.loop import run_iteration

    cfg, run_dir = job.cfg, job.run_dir
    replay = run_dir.replay / f"iter_{it:04d}"
    resumed = bool(run_dir.read_state()["phases"]) or games_on_disk(replay) > 0
    progress.start_iteration(it, job.last)
    record = run_iteration(
        cfg, run_dir, it, progress.report, job.oracle, job.oracle_table, league=job.league,
        backend=job.backend, settings=job.settings,
    )  # fmt: skip
    seconds = progress.end_iteration()
    sp = record.get("selfplay", {})
    if sp.get("games") and sp.get("sims"):  # measured: better than the estimate
        progress.sims_per_game = sp["sims"] / sp["games"]
    line = summary_text(
        record, last=job.last, seconds=seconds, games=games_on_disk(replay) or None,
        resumed=resumed, trains_policy=search_kind(cfg.search.kind).trains_policy,
        max_gate_games=cfg.gate.max_games,
    )  # fmt: skip
    progress.echo_above(line, typer.echo)


def _start_ray(cfg: YatzyConfig) -> None:
    """Join (or start) Ray for ``run.backend: ray``; a missing extra is a one-line error."""
    if cfg.run.backend != "ray":
        return
    from leaguezero.distributed.runtime import RayUnavailableError, init_ray

    try:
        init_ray(cfg.run.ray_address)
    except RayUnavailableError as err:
        raise fail(str(err)) from None


def _league_run(job: RunJob):
    """The run's :class:`~leaguezero.yatzy.train.league.run.LeagueRun` (league mode)."""
    from leaguezero.league.registry import RegistryError
    from leaguezero.yatzy.train.league.run import LeagueRun

    eval_runner = None
    if job.cfg.run.backend == "ray":  # evaluation jobs as Ray tasks (docs/guides/cluster.md)
        from leaguezero.distributed.evaluator import RayJobRunner

        eval_runner = RayJobRunner(job.cfg.run.ray_address)
    try:
        return LeagueRun(
            job.cfg, job.run_dir, settings=job.settings, oracle=job.oracle,
            oracle_table=job.oracle_table, eval_runner=eval_runner,
        )  # fmt: skip
    except (RegistryError, RuntimeError) as err:
        raise fail(str(err)) from None


def _check_run_state(run_dir: RunDir) -> int:
    """The last finished iteration in RUN/run_state.json; a damaged file is a one-line error."""
    try:
        state = run_dir.read_state()
        iteration = state["iteration"]
        if not isinstance(iteration, int) or not isinstance(state.get("phases"), list):
            raise TypeError("'iteration' must be a number and 'phases' a list")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise fail(
            f"{run_dir.state_path} is damaged ({reason}); restore it, or delete it to restart "
            "the run's iteration count (models and replay stay)"
        ) from None
    return iteration


def _init_from_path(text: str) -> Path:
    """The checkpoint file ``--init-from`` names (``pretrained``, ``model:PATH`` or a path)."""
    from leaguezero.yatzy.agents.registry import AgentSpecError, parse_agent_spec

    try:
        spec = parse_agent_spec(text, bare_path=True)
    except AgentSpecError as err:
        raise fail(f"--init-from: {err}") from None
    if spec.path is None or "?" in text:
        raise fail(f"--init-from needs a network: pretrained or a checkpoint path, not {text!r}")
    return spec.path
