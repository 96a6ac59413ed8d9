"""League mode of ``yz run --league``: the Yatzy side of a
:class:`~leaguezero.league.session.LeagueSession` around the AlphaZero loop
(see docs/guides/yatzy_league.md).

The session owns the league (registry, match log, PFSP, win rates, the hero's own rating, the
checkpointer, the async evaluator, events, ``league_elo.png``, WandB); this module gives it
Yatzy's baselines and tournament and plays the games. :class:`LeagueRun` is created once per
``yz run`` process and handed to :func:`leaguezero.yatzy.train.loop.run_iteration`, which calls

- :meth:`LeagueRun.selfplay` instead of plain self-play (hero vs PFSP-sampled opponents),
- :meth:`LeagueRun.after_train` when a candidate checkpoint exists (the schedule decides whether
  it joins the league; every ``league.eval_every`` iterations the evaluator rates it in the
  background while the loop goes on with gating),
- :meth:`LeagueRun.end_iteration` (reap evaluator jobs, redraw the Elo chart, log to WandB);

and ``yz run`` calls :meth:`LeagueRun.close` at the end (waits for the last evaluation).

Files: ``RUN/league.json``, ``RUN/league_matches.ndjson`` (training and evaluation games),
``RUN/events.ndjson`` (league events), ``RUN/league_elo.png``, ``RUN/league_state.json`` (the
hero's rating, so a resumed run goes on from it).

League names: ``random``, ``greedy``, ``oracle`` (bots), ``base_model`` (the initial net,
``models/best_0000.pt``) and ``ckpt_NNNNNN`` (:func:`~leaguezero.league.types.checkpoint_name`
of the training step: the candidate of iteration ``it`` is step ``it * train.steps``,
``models/candidate_NNNN.pt``). The hero is the current best net: the checkpoint of the last
promoted iteration, or ``base_model`` before the first promotion; its rating is the session's
live rating of the hero role, from its own training games.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.events import EventWriter
from leaguezero.league.evaluator import JobRunner
from leaguezero.league.matchmaker import Draw, WinRateTable
from leaguezero.league.registry import RegistryError
from leaguezero.league.session import BASE_MODEL, RESUMED_EVENT, LeagueSession, checkpoint_name
from leaguezero.league.types import TRAINING_KIND, AgentInfo, MatchResult
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.kinds import hero_factory
from leaguezero.yatzy.train.league.agents import build_league_agent, yatzy_tournament
from leaguezero.yatzy.train.league.play import (
    LeagueSelfPlayStats,
    drop_unplayed,
    run_league_selfplay,
)
from leaguezero.yatzy.train.loop import RunDir

_BEST_FILE = re.compile(r"^best_(\d{4})\.pt$")
STATE_FORMAT = "leaguezero.yatzy.league_state"
STATE_SCHEMA_VERSION = 1


def iteration_step(cfg: YatzyConfig, iteration: int) -> int:
    """The hero's training step after ``iteration`` iterations (the league's x-axis)."""
    return iteration * cfg.train.steps


def hero_name(cfg: YatzyConfig, run: RunDir) -> str:
    """The league name of the current best net (the newest ``models/best_NNNN.pt``)."""
    promoted = [int(m.group(1)) for p in run.models.iterdir() if (m := _BEST_FILE.match(p.name))]
    last = max(promoted, default=0)
    return BASE_MODEL if last == 0 else checkpoint_name(iteration_step(cfg, last))


def hero_win_rates(results: list[MatchResult], table: WinRateTable) -> None:
    """Fold training games into ``table``: the hero's result against each opponent.

    The hero is a role (its seat is ``meta["hero_seat"]``), not one fixed name, so the decayed
    table follows the hero through promotions, as AlphaStar's PFSP win rates do.
    """
    for result in results:
        seat = result.meta.get("hero_seat")
        mirror = result.meta.get("opponent_type") == "self"
        if result.kind != TRAINING_KIND or seat is None or mirror:
            continue
        by_seat = {p.seat: p for p in result.participants}
        hero, other = by_seat.get(seat), by_seat.get(1 - int(seat))
        if hero is None or other is None:
            continue
        score = 1.0 if hero.score > other.score else 0.5 if hero.score == other.score else 0.0
        table.update(other.agent, score)


class LeagueRun:
    """The league side of one ``yz run`` process (see the module docstring).

    ``eval_runner``: where evaluation jobs run (the command line passes a Ray runner for
    ``run.backend: ray``; default a local process per job).
    """

    def __init__(
        self,
        cfg: YatzyConfig,
        run: RunDir,
        *,
        settings: SearchSettings,
        oracle=None,
        oracle_table: str | os.PathLike | None = None,
        eval_runner: JobRunner | None = None,
    ) -> None:
        self.cfg = cfg
        self.league_cfg = lc = cfg.league
        self.search = settings  # the run's: opponents and evaluator search alike
        self.run = run
        self.oracle = oracle
        self.oracle_table = None if oracle_table is None else str(oracle_table)
        self.state_path = run.root / "league_state.json"
        self.session = LeagueSession(
            run.root,
            lc,
            run_name=cfg.run.name,
            baselines={"random": lc.random_elo, "greedy": lc.greedy_elo,
                       "oracle": lc.oracle_elo, BASE_MODEL: lc.base_model_elo},
            anchor="random",
            # the untrained net is the league's base model (docs/reference/design.md)
            baseline_paths={BASE_MODEL: "models/best_0000.pt"},
            tournament=yatzy_tournament,
            tournament_kwargs={"games_per_opponent": lc.eval_games,
                               "search": self.search.evaluation(lc.eval_sims).to_dict(),
                               "oracle_table": self.oracle_table},
            seed=cfg.run.seed,
            hero=hero_name(cfg, run),
            hero_start=hero_name(cfg, run),
            extra_gatekeepers=lc.eval_extra_gatekeepers,
            eval_runner=eval_runner,
            tracker_config=cfg.model_dump(mode="json"),
            elo_png="league_elo.png",
        )  # fmt: skip
        self.registry = self.session.registry
        self.events = self.session.events
        self.evaluator = self.session.evaluator
        hero_win_rates(self.session.matchlog.read(kind="training"), self.session.win_rates)
        self._load_state()
        self._resubmit_unrated()

    # ----- self-play ---------------------------------------------------------------------
    def opponent_agent(self, info: AgentInfo, seed: int):
        """The match agent of a sampled opponent: checkpoints search with the run's settings
        at ``league.opponent_sims``."""
        return build_league_agent(
            info, settings=self.search.evaluation(self.league_cfg.opponent_sims), seed=seed,
            oracle=self.oracle, oracle_table=self.oracle_table, resolve=self.registry.resolve,
        )  # fmt: skip

    def selfplay(
        self,
        it: int,
        evaluator,
        out_dir: Path,
        *,
        games: int,
        seed: int,
        roots_log: EventWriter | None = None,
        oracle_values=None,
        progress=None,
    ) -> LeagueSelfPlayStats:
        """Iteration ``it``'s self-play: the best net against PFSP-sampled league opponents."""
        session = self.session
        state = self.registry.load()
        session.hero = hero = hero_name(self.cfg, self.run)
        hero_elo = session.hero_elo
        step = iteration_step(self.cfg, it - 1)  # the hero has trained this many steps

        def sample(game_index: int) -> Draw:
            # Keyed by the game index, so a resumed iteration draws the same opponents.
            rng = np.random.default_rng([seed, game_index])
            return session.sample(step, 1, state=state, rng=rng)[0]

        agents: dict[str, Any] = {}

        def agent_for(name: str):
            if name not in agents:
                agents[name] = self.opponent_agent(state.agents[name], seed)
            return agents[name]

        def on_games(results: list[MatchResult]) -> None:
            session.record(step, results, win_rates=hero_win_rates)

        self._forget_unplayed(step, out_dir)

        self.events.emit("league.selfplay_started", iteration=it, step=step, hero=hero)
        stats = run_league_selfplay(
            self.cfg, evaluator, out_dir, settings=self.search, games=games, seed=seed,
            hero=hero, sample=sample,
            agent_for=agent_for, step=step, on_games=on_games, roots_log=roots_log,
            oracle_values=oracle_values, progress=progress,
            hero_factory=hero_factory(self.cfg.search.kind),
        )  # fmt: skip
        summary = {
            "iteration": it, "step": step, "hero": hero, "hero_elo": hero_elo,
            "games": stats.games, "opponents": stats.opponents, "buckets": stats.buckets,
            "opponent_types": stats.opponent_types,
            "hero_win_rate_by_type": stats.hero_win_rate_by_type,
            "hero_win_rate_by_opponent": stats.hero_win_rate_by_opponent,
        }  # fmt: skip
        self.events.emit("league.selfplay_finished", **summary)
        session.end_step(step)
        self._save_state()
        return stats

    def _forget_unplayed(self, step: int, out_dir: Path) -> None:
        """Take out of the match log the training games of ``step`` that a kill left logged
        but not on disk (those at or past the games in complete shards, which the resumed
        self-play plays again), and refold the win rates without them."""
        with self.registry.locked():
            dropped = drop_unplayed(self.session.matchlog, step, out_dir)
        if dropped:
            self.session.win_rates = WinRateTable()
            hero_win_rates(self.session.matchlog.read(kind="training"), self.session.win_rates)
            self.events.emit(RESUMED_EVENT, step=step, dropped=dropped, resubmitted=[])

    # ----- the checkpointer and the evaluator --------------------------------------------
    def after_train(self, it: int, candidate: Path) -> AgentInfo | None:
        """Add iteration ``it``'s candidate by the schedule; submit its rating when due."""
        step = iteration_step(self.cfg, it)
        name = checkpoint_name(step)
        agent = self.registry.load().agents.get(name)  # already there when a killed run resumes
        if agent is None:
            hero = hero_name(self.cfg, self.run)
            agent = self.session.checkpoint(step, lambda _: candidate, parent=hero)
        if agent is not None:
            self.session.maybe_evaluate(step, index=it, challenger=name)
        self.evaluator.poll()
        return agent

    def end_iteration(self, it: int) -> None:
        """Reap finished evaluations, redraw the Elo chart and log new ratings."""
        self.evaluator.poll()
        self.events.emit("league.iteration_done", iteration=it, step=iteration_step(self.cfg, it))
        self.session.refresh_outputs()

    def close(self, timeout: float = 900.0) -> None:
        """Wait for the evaluator's last job, then write the final chart and logs."""
        self.session.close(timeout)

    def _resubmit_unrated(self) -> None:
        # A run killed while its evaluator ran lost that job: rate the newest checkpoint again
        # if it has no evaluation games yet (the evaluator only ever rates the newest anyway).
        latest = self.registry.load().latest_checkpoint
        if latest is None or latest.step is None:
            return
        iteration = latest.step // self.cfg.train.steps
        self.session.maybe_evaluate(latest.step, index=iteration, challenger=latest.name)

    # ----- the hero's rating across restarts ---------------------------------------------
    def _save_state(self) -> None:
        atomic_write_json(
            self.state_path,
            {"format": STATE_FORMAT, "schema_version": STATE_SCHEMA_VERSION,
             "hero": self.session.hero, "hero_elo": self.session.hero_elo},
        )  # fmt: skip

    def _load_state(self) -> None:
        # The win rates are folded from the match log; the live rating is kept here (a run
        # from before the file existed starts at the hero's registry rating).
        if not self.state_path.exists():
            return
        import json

        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise RegistryError(f"{self.state_path} is unreadable ({err}); delete it to restart "
                             "the hero's rating from its registry rating") from None  # fmt: skip
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise RegistryError(f"{self.state_path} is not a Yatzy league state")
        if data.get("schema_version") != STATE_SCHEMA_VERSION:
            raise RegistryError(
                f"{self.state_path} has schema_version {data.get('schema_version')!r}, this "
                f"leaguezero reads {STATE_SCHEMA_VERSION}"
            )
        self.session.load_state_dict({"hero_elo": data.get("hero_elo")})
