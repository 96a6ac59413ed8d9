"""One league run of any game: :class:`LeagueSession` owns every league part a training loop uses.

The session holds the registry (``league.json``, created with the game's baselines and
reconciled with the files on disk), the match log, the hero's decayed win-rate table, the PFSP
matchmaker, the live hero's rating, the checkpointer (:func:`checkpoint_name`, the geometric
schedule with its promotion reasons, retirement of stale curriculum snapshots), the async
evaluator and its gatekeepers, and the tracker (NDJSON events, the Elo PNG, WandB). A game
gives it only what is its own — its baselines and their ratings, the evaluator's tournament
(an import path), a function that saves the hero — and plays the games itself; a loop step is::

    draws = session.sample(step, k)          # PFSP opponents, logged
    results = <the game plays the hero against them>
    session.record(step, results)            # match log, win rates, the hero's own rating
    <the game updates the hero>
    session.checkpoint(step, save)           # by the schedule (then session.retire(step))
    session.maybe_evaluate(step)             # every eval_every steps, in the background
    <the game saves its state, with session.state_dict()>
    session.end_step(step)                   # step summary event + WandB, reap evaluations

and a resumed run calls ``session.load_state_dict(saved)`` and ``session.resume(saved_step)``:
the training games of steps after the saved one leave the match log (they are played again),
and the evaluations the saved state had pending are submitted again, so a kill anywhere
neither duplicates games nor loses an evaluation (an evaluation is rated once per
(challenger, step) however often it is submitted, :func:`~.eval_job.evaluation_logged`).

The live hero's rating (:attr:`LeagueSession.hero_elo`: the "peers" and "exploitable" buckets of
docs/reference/design.md#matchmaking-pfsp, the "elite" rule of #checkpoint-schedule) comes from
games the hero played: it starts at the rating of the agent the hero starts from (``base_model``)
and moves by
online Elo (K = ``league.elo_k``) over its own training games, the opponents' registry ratings held
fixed (:func:`~.rating.rate_against_fixed`). It is not inherited from the newest checkpoint: a copy
of that rating can never exceed the best checkpoint's, so the elite rule would never fire and every
unrated snapshot would sit exactly at the hero's rating (no exploitable opponent). A checkpoint
joins the league at the live rating; the evaluator later replaces it by a rating fitted on
evaluation games.

Backends are injected, never chosen here: ``eval_runner`` (a
:class:`~.eval_runner.JobRunner`, default a local process per job).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from leaguezero.common.events import EventWriter, read_events
from leaguezero.league.config import LeagueSection
from leaguezero.league.eval_job import Tournament, choose_gatekeepers, evaluation_logged
from leaguezero.league.eval_runner import JobRunner
from leaguezero.league.evaluator import AsyncEvaluator, evaluator_paths
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import Draw, PFSPMatchmaker, WinRateTable
from leaguezero.league.rating import rate_against_fixed
from leaguezero.league.registry import LeagueRegistry, LeagueState
from leaguezero.league.schedule import promote_if_scheduled, promotion_reasons, retire_candidates
from leaguezero.league.step_summary import step_summary
from leaguezero.league.tracking import (
    ELO_UPDATED,
    STEP_SUMMARY,
    WandbTracker,
    emit_opponents_sampled,
    plot_elo,
)
from leaguezero.league.types import (
    BASE_MODEL,
    AgentInfo,
    AgentKind,
    MatchResult,
    checkpoint_name,
)

__all__ = ["BASE_MODEL", "HERO", "LeagueSession", "checkpoint_name", "evaluator_paths"]

HERO = "hero"  # the live, training hero's league name (its mirror seats)
RETIRED_EVENT = "league.checkpoints_retired"
DROPPED_EVENT = "league.checkpoints_dropped"
RESUMED_EVENT = "league.resumed"
SESSION_STATE_VERSION = 1
# Games a resumed run plays again after its saved step: the hero's and its exploiters'.
REPLAYED_KINDS = ("training", "exploiter")


class LeagueSession:
    """The league side of one training run (see the module docstring).

    Args:
        run_dir: the run directory (``league.json``, ``league_matches.ndjson``,
            ``events.ndjson`` and ``elo_png`` live there; checkpoint paths are relative to it).
        cfg: the game's ``league`` section (a :class:`~.config.LeagueSection`).
        run_name: stored in ``league.json`` and names the WandB run.
        baselines: initial rating of every baseline (bots and ``base_model``).
        anchor: the baseline whose rating pins the scale.
        baseline_paths: files of baselines that have one (e.g. ``base_model``'s initial net).
        tournament: the evaluator's tournament, a module-level function.
        tournament_kwargs: its keyword arguments (plain data).
        eval_summary: a module-level ``fn(results, **tournament_kwargs) -> dict`` whose fields
            join each ``league.evaluation_finished`` event (None: none).
        seed: seeds the matchmaker and the evaluator's games.
        hero: the live hero's league name; ``hero_start`` the agent it starts as.
        extra_gatekeepers: agents every evaluation adds to the design's gatekeepers.
        eval_runner: where evaluation jobs run (default: a local process per job).
        tracker_config: the resolved run config, logged with WandB (``cfg.wandb``).
        elo_png: file name of the Elo chart.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        cfg: LeagueSection,
        *,
        run_name: str,
        baselines: Mapping[str, float],
        anchor: str,
        tournament: Tournament,
        tournament_kwargs: Mapping[str, Any] | None = None,
        eval_summary: Callable[..., dict[str, Any]] | None = None,
        seed: int = 0,
        baseline_paths: Mapping[str, str] | None = None,
        hero: str = HERO,
        hero_start: str = BASE_MODEL,
        extra_gatekeepers: Sequence[str] = (),
        eval_runner: JobRunner | None = None,
        tracker_config: Mapping[str, Any] | None = None,
        elo_png: str = "elo.png",
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.paths = evaluator_paths(self.run_dir)
        self.hero = hero
        self.extra_gatekeepers = list(extra_gatekeepers)
        self.elo_png = self.run_dir / elo_png
        self.registry = LeagueRegistry.create(
            self.paths["registry"], run_name=run_name, baselines=baselines, anchor=anchor
        )
        self._add_missing_baselines(baselines)
        if baseline_paths:
            with self.registry.update() as state:
                for name, path in baseline_paths.items():
                    if name in state.agents and state.agents[name].path is None:
                        state.agents[name].path = path
        self.events = EventWriter(self.paths["events"])
        dropped = self.registry.reconcile()
        if dropped:
            self.events.emit(DROPPED_EVENT, agents=dropped, reason="file missing")
        self.matchlog = MatchLog(self.paths["matchlog"])
        self.win_rates = WinRateTable()
        self.matchmaker = PFSPMatchmaker(
            shares=cfg.bucket_shares(),
            peer_window=cfg.peer_window,
            weighting=cfg.weighting,
            mode=cfg.mode,
            min_checkpoints=cfg.min_checkpoints,
            baselines_weighting=cfg.baselines_weighting,
            seed=seed,
        )
        start = self.registry.load().agents.get(hero_start)
        self.hero_elo = float(start.elo if start is not None else baselines[anchor])
        self.evaluator = AsyncEvaluator(
            registry_path=self.paths["registry"],
            matchlog_path=self.paths["matchlog"],
            events_path=self.paths["events"],
            tournament=tournament,
            tournament_kwargs=dict(tournament_kwargs or {}),
            summary=eval_summary,
            every=cfg.eval_every,
            method=cfg.rating,
            elo_k=cfg.elo_k,
            bootstrap=cfg.bootstrap,
            seed=seed,
            runner=eval_runner,
        )
        self.tracker = (
            WandbTracker(run_name, self.run_dir, cfg.wandb_mode, tracker_config or {})
            if cfg.wandb
            else None
        )
        self._submitted: set[tuple[str, int]] = set()
        self._pending: list[dict[str, Any]] = []  # a loaded state's unfinished evaluations
        self._draws: list[Draw] = []
        self._results: list[MatchResult] = []

    def _add_missing_baselines(self, baselines: Mapping[str, float]) -> None:
        """Baselines the game names that an existing ``league.json`` lacks (a league created by
        an older version, before the game added one) join it at their initial rating."""
        if all(name in self.registry.load().agents for name in baselines):
            return
        with self.registry.update() as state:
            for name, elo in baselines.items():
                if name not in state.agents:
                    state.agents[name] = AgentInfo(
                        name=name, type=AgentKind.BASELINE, elo=float(elo)
                    )

    # ----- opponents and results -------------------------------------------------------------
    def sample(
        self,
        step: int,
        k: int,
        *,
        state: LeagueState | None = None,
        rng: np.random.Generator | None = None,
    ) -> list[Draw]:
        """``k`` PFSP opponents for the live hero, logged as ``league.opponent_sampled``.

        ``state``: a registry snapshot to draw from (default: the current one); ``rng``: a
        generator to draw with instead of the session's (e.g. keyed by game index).
        """
        state = self.registry.load() if state is None else state
        if rng is not None:
            self.matchmaker.rng = rng
        draws = self.matchmaker.sample(state, self.hero, self.hero_elo, k, self.win_rates)
        emit_opponents_sampled(self.events, step, draws)
        self._draws.extend(draws)
        return draws

    def record(
        self,
        step: int,
        results: Sequence[MatchResult],
        *,
        win_rates: Callable[[Sequence[MatchResult], WinRateTable], None] | None = None,
    ) -> None:
        """Log the hero's games, fold them into the win-rate table and rate the live hero.

        ``win_rates`` replaces the default table update (every pairwise outcome of the
        ``hero`` agent) for a game whose hero seat is marked otherwise.
        """
        self.matchlog.extend(results)
        if win_rates is None:
            self.win_rates.update_from_matches(results, self.hero)
        else:
            win_rates(results, self.win_rates)
        ratings = self.registry.load().ratings()
        self.hero_elo = rate_against_fixed(
            self.hero, self.hero_elo, results, ratings, k=self.cfg.elo_k
        )
        self._results.extend(results)

    # ----- the checkpointer ------------------------------------------------------------------
    def checkpoint(
        self,
        step: int,
        save: Callable[[str], str | os.PathLike],
        *,
        name: str | None = None,
        parent: str | None = None,
    ) -> AgentInfo | None:
        """Add the hero's snapshot at ``step`` when the schedule says so; returns it or None.

        ``save(name)`` writes the snapshot and returns its path (only called when scheduled).
        The snapshot's parent is the newest checkpoint (``parent`` overrides), its initial
        rating the live hero's; the reasons are stored in ``extra["reasons"]``.
        """
        name = checkpoint_name(step) if name is None else name
        state = self.registry.load()
        margin = self.cfg.elite_margin
        if name in state.agents or not promotion_reasons(step, self.hero_elo, state, margin):
            return None
        path = os.path.relpath(os.path.abspath(save(name)), os.path.abspath(self.run_dir))
        latest = state.latest_checkpoint
        if parent is None:
            parent = latest.name if latest is not None else BASE_MODEL
        return promote_if_scheduled(
            self.registry,
            name=name,
            path=path,
            step=step,
            current_elo=self.hero_elo,
            parent=parent if parent in state.agents else None,
            events=self.events,
            elo=self.hero_elo,
            elite_margin=margin,
        )

    def retire(self, step: int) -> list[str]:
        """Stop sampling curriculum snapshots that left the recent window
        (docs/reference/design.md#checkpoint-schedule).

        The schedule admits every 10th step as training moves on; ``retire_candidates`` names
        those older than 100 steps that are no anchor, elite, first or best checkpoint. They are
        marked ``extra["retired"] = step`` under the registry lock, so the matchmaker and the
        evaluator's gatekeepers skip them while their ratings and games stay on record.
        """

        def stale(state: LeagueState) -> list[str]:
            live = [a for a in state.checkpoints if not a.extra.get("retired")]
            return retire_candidates(live, step, state.best_agent)

        if not stale(self.registry.load()):  # most steps: no lock, no rewrite of league.json
            return []
        with self.registry.update() as state:
            names = stale(state)  # again under the lock: the evaluator may have moved `best`
            for name in names:
                state.agents[name].extra["retired"] = step
        if names:
            self.events.emit(RETIRED_EVENT, step=step, agents=names)
        return names

    # ----- the evaluator ---------------------------------------------------------------------
    def maybe_evaluate(
        self, step: int, *, index: int | None = None, challenger: str | None = None
    ) -> bool:
        """:meth:`evaluate` when ``index`` (default ``step``; Yatzy counts iterations) is a
        multiple of ``eval_every``."""
        if (step if index is None else index) % self.cfg.eval_every != 0:
            return False
        return self.evaluate(step, challenger)

    def evaluate(self, step: int, challenger: str | None = None) -> bool:
        """Rate ``challenger`` (default: the newest checkpoint) in the background.

        The gatekeepers are the design's (:func:`~.eval_job.choose_gatekeepers`) plus
        ``extra_gatekeepers``. A (challenger, step) pair is never rated twice — a resumed step
        would replay the very same seeded games and count them double. Returns whether a job
        was submitted.
        """
        state = self.registry.load()
        if challenger is None:
            latest = state.latest_checkpoint
            if latest is None:
                return False
            challenger = latest.name
        key = (challenger, step)
        if key in self._submitted or self._rated(challenger, step):
            return False
        self._submitted.add(key)
        keepers = choose_gatekeepers(state, challenger) + self.extra_gatekeepers
        keepers = [g for g in dict.fromkeys(keepers) if g != challenger and g in state.agents]
        self.evaluator.submit(step, challenger, gatekeepers=keepers)
        return True

    def _rated(self, name: str, step: int) -> bool:
        return evaluation_logged(self.matchlog.read(kind="evaluation"), name, step)

    # ----- resuming a killed run -------------------------------------------------------------
    def resume(self, step: int) -> dict[str, Any]:
        """Make the league's files agree with a run resumed after ``step`` (the saved state's,
        0 for none; call after :meth:`load_state_dict`); ``league.resumed`` reports what it did.

        * Training games of later steps are taken out of the match log: they were logged by
          steps whose state was never saved, which the resumed run plays again (logged twice
          otherwise). The rewrite holds the writers' lock, under which the evaluator appends.
        * The evaluations the saved state had pending (running or waiting,
          :meth:`~.evaluator.AsyncEvaluator.pending`) and that never logged their games are
          submitted again, with their gatekeepers — the job a kill took down, or the last
          step's, which no later step would submit. One that finished, or finishes now as an
          orphan of the killed run, is not rated twice (the job checks the log under the lock).

        Returns what was done (``dropped`` training games, ``resubmitted`` (challenger, step)).
        """
        with self.registry.locked():
            dropped = sum(
                self.matchlog.drop(kind=kind, min_step=step + 1) for kind in REPLAYED_KINDS
            )
        agents = self.registry.load().agents
        resubmitted = []
        for job in sorted(self._pending, key=lambda j: int(j["step"])):
            name, at = str(job["challenger"]), int(job["step"])
            if name not in agents or (name, at) in self._submitted or self._rated(name, at):
                continue
            keepers = job.get("gatekeepers")
            if keepers is not None:
                keepers = [g for g in keepers if g in agents and g != name]
            self._submitted.add((name, at))
            self.evaluator.submit(at, name, gatekeepers=keepers)
            resubmitted.append([name, at])
        self._pending = []
        done = {"step": step, "dropped": dropped, "resubmitted": resubmitted}
        if dropped or resubmitted:  # a fresh run, or a clean stop, has nothing to report
            self.events.emit(RESUMED_EVENT, **done)
        return done

    # ----- tracking --------------------------------------------------------------------------
    def end_step(self, step: int) -> dict[str, Any]:
        """Summarise the draws and games since the last call (``league.step_summary``, WandB)
        and reap finished evaluations."""
        agents = self.registry.load().agents
        summary = step_summary(step, self.hero, self.hero_elo, self._draws, self._results, agents)
        self._draws, self._results = [], []
        self.events.emit(STEP_SUMMARY, **summary)
        if self.tracker is not None:
            self.tracker.log_step(summary)
        self.evaluator.poll()
        return summary

    def refresh_outputs(self, *, always: bool = False) -> None:
        """Redraw the Elo chart (when there are ratings, or ``always``) and log new ratings to
        WandB."""
        events = self.paths["events"]
        if always or any(True for _ in read_events(events, ELO_UPDATED)):
            plot_elo(events, self.elo_png)
        if self.tracker is not None:
            self.tracker.log_new_ratings(events)

    # ----- state and shutdown ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs: matchmaker RNG, win-rate table, the live hero's rating,
        the evaluations not finished yet (``pending_evaluations``, for :meth:`resume`)."""
        return {
            "session_version": SESSION_STATE_VERSION,
            "matchmaker_rng": self.matchmaker.rng.bit_generator.state,
            "win_rates": self.win_rates.to_dict(),
            "hero_elo": self.hero_elo,
            "pending_evaluations": self.evaluator.pending(),
        }

    def load_state_dict(self, data: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`; missing parts keep their current value (a state
        without ``hero_elo``, written before the live rating existed, keeps the rating the hero
        starts from)."""
        if data.get("matchmaker_rng") is not None:
            self.matchmaker.rng.bit_generator.state = data["matchmaker_rng"]
        if data.get("win_rates") is not None:
            self.win_rates = WinRateTable.from_dict(data["win_rates"])
        if data.get("hero_elo") is not None:
            self.hero_elo = float(data["hero_elo"])
        if data.get("pending_evaluations") is not None:
            self._pending = [dict(job) for job in data["pending_evaluations"]]

    def close(self, timeout: float = 900.0) -> None:
        """Wait for the evaluator's last job, write the chart and WandB logs, close files."""
        try:
            self.evaluator.close(timeout)
            self.refresh_outputs(always=True)
            if self.tracker is not None:
                self.tracker.finish()
        finally:
            self.events.close()
