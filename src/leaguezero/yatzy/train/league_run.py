"""League mode of ``yz run --league``: the registry, opponent sampling, the checkpointer and the
async evaluator around the AlphaZero loop (see docs/yatzy_league.md).

:class:`LeagueRun` is created once per ``yz run`` process and handed to
:func:`leaguezero.yatzy.train.loop.run_iteration`, which calls

- :meth:`LeagueRun.selfplay` instead of plain self-play (hero vs PFSP-sampled opponents),
- :meth:`LeagueRun.after_train` when a candidate checkpoint exists (the schedule decides whether
  it joins the league; every ``league.eval_every`` iterations the evaluator rates it in a
  background process while the loop goes on with gating),
- :meth:`LeagueRun.end_iteration` (reap evaluator jobs, redraw the Elo chart, log to WandB);

and ``yz run`` calls :meth:`LeagueRun.close` at the end (waits for the last evaluation).

Files (the league's conventions, :func:`leaguezero.league.evaluator.evaluator_paths`):
``RUN/league.json``, ``RUN/league_matches.ndjson`` (training and evaluation games),
``RUN/events.ndjson`` (league events), ``RUN/league_elo.png``.

League names: ``random``, ``greedy``, ``oracle`` (bots), ``base_model`` (the initial net,
``models/best_0000.pt``) and ``ckpt_NNNN`` (the candidate trained in iteration NNNN,
``models/candidate_NNNN.pt``). The hero is the current best net: ``ckpt_NNNN`` of the last
promoted iteration, or ``base_model`` before the first promotion.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leaguezero.common.events import EventWriter, read_events
from leaguezero.league.evaluator import AsyncEvaluator, choose_gatekeepers, evaluator_paths
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import Draw, PFSPMatchmaker, WinRateTable
from leaguezero.league.registry import LeagueRegistry, LeagueState
from leaguezero.league.schedule import promote_if_scheduled
from leaguezero.league.tracking import ELO_UPDATED, emit_opponents_sampled, plot_elo
from leaguezero.league.types import AgentInfo, MatchResult
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.kinds import hero_factory
from leaguezero.yatzy.train.league_eval import TOURNAMENT, build_league_agent
from leaguezero.yatzy.train.league_play import LeagueSelfPlayStats, run_league_selfplay
from leaguezero.yatzy.train.loop import RunDir

BASE_MODEL = "base_model"
_BEST_FILE = re.compile(r"^best_(\d{4})\.pt$")


def _digest(path: Path) -> str:
    return hashlib.sha1(str(path).encode()).hexdigest()[:10]


def checkpoint_name(iteration: int) -> str:
    return f"ckpt_{iteration:04d}"


def hero_name(run: RunDir) -> str:
    """The league name of the current best net (the newest ``models/best_NNNN.pt``)."""
    promoted = [int(m.group(1)) for p in run.models.iterdir() if (m := _BEST_FILE.match(p.name))]
    last = max(promoted, default=0)
    return BASE_MODEL if last == 0 else checkpoint_name(last)


def hero_win_rates(results: list[MatchResult], table: WinRateTable) -> None:
    """Fold training games into ``table``: the hero's result against each opponent.

    The hero is a role (its seat is ``meta["hero_seat"]``), not one fixed name, so the decayed
    table follows the hero through promotions, as AlphaStar's PFSP win rates do.
    """
    for result in results:
        seat = result.meta.get("hero_seat")
        if result.kind != "training" or seat is None or result.meta.get("opponent_type") == "self":
            continue
        by_seat = {p.seat: p for p in result.participants}
        hero, other = by_seat.get(seat), by_seat.get(1 - int(seat))
        if hero is None or other is None:
            continue
        score = 1.0 if hero.score > other.score else 0.5 if hero.score == other.score else 0.0
        table.update(other.agent, score)


class LeagueRun:
    """The league side of one ``yz run`` process (see the module docstring)."""

    def __init__(
        self,
        cfg: YatzyConfig,
        run: RunDir,
        *,
        oracle=None,
        oracle_table: str | os.PathLike | None = None,
        make_evaluator: Callable[..., AsyncEvaluator] = AsyncEvaluator,
    ) -> None:
        """``make_evaluator`` builds the background evaluator (the command line passes the Ray
        one for ``run.backend: ray``; default: a local process per evaluation job)."""
        self.cfg = cfg
        self.league_cfg = cfg.league
        self.search = SearchSettings.from_config(cfg)  # opponents and evaluator search alike
        self.run = run
        self.oracle = oracle
        self.oracle_table = None if oracle_table is None else str(oracle_table)
        paths = evaluator_paths(run.root)
        self.paths = paths
        lc = cfg.league
        self.registry = LeagueRegistry.create(
            paths["registry"],
            run_name=cfg.run.name,
            baselines={"random": lc.random_elo, "greedy": lc.greedy_elo,
                       "oracle": lc.oracle_elo, BASE_MODEL: lc.base_model_elo},
            anchor="random",
        )  # fmt: skip
        with self.registry.update() as state:
            base = state.agents.get(BASE_MODEL)
            if base is not None and base.path is None:
                base.path = "models/best_0000.pt"  # the untrained net is the spec's base model
        self.events = EventWriter(paths["events"])
        dropped = self.registry.reconcile()
        if dropped:
            self.events.emit("league.checkpoints_dropped", agents=dropped, reason="file missing")
        self.matchlog = MatchLog(paths["matchlog"])
        self.win_rates = WinRateTable()
        hero_win_rates(self.matchlog.read(kind="training"), self.win_rates)
        self.shares = lc.bucket_shares()
        self.evaluator = make_evaluator(
            registry_path=paths["registry"], matchlog_path=paths["matchlog"],
            events_path=paths["events"], tournament=TOURNAMENT,
            tournament_kwargs={"games_per_opponent": lc.eval_games,
                               "search": self.search.evaluation(lc.eval_sims).to_dict(),
                               "oracle_table": self.oracle_table},
            every=1, method=lc.rating, elo_k=lc.k_factor, bootstrap=lc.bootstrap,
            seed=cfg.run.seed,
        )  # fmt: skip
        self.tracker = WandbTracker(cfg, run.root) if lc.wandb else None
        self._submitted: set[str] = set()
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
        lc = self.league_cfg
        state = self.registry.load()
        hero = hero_name(self.run)
        hero_elo = self._hero_elo(state, hero)
        step = (it - 1) * self.cfg.train.steps  # the hero has trained this many steps
        matchmaker = PFSPMatchmaker(
            shares=self.shares, peer_window=lc.peer_window, weighting=lc.weighting,
            mode=lc.mode, min_checkpoints=lc.min_checkpoints, seed=seed,
        )  # fmt: skip

        def sample(game_index: int) -> Draw:
            # Keyed by the game index, so a resumed iteration draws the same opponents.
            import numpy as np

            matchmaker.rng = np.random.default_rng([seed, game_index])
            draw = matchmaker.sample(state, hero, hero_elo, 1, self.win_rates)[0]
            emit_opponents_sampled(self.events, step, [draw])
            return draw

        agents: dict[str, Any] = {}

        def agent_for(name: str):
            if name not in agents:
                agents[name] = self.opponent_agent(state.agents[name], seed)
            return agents[name]

        def on_games(results: list[MatchResult]) -> None:
            self.matchlog.extend(results)
            hero_win_rates(results, self.win_rates)

        self.events.emit("league.selfplay_started", iteration=it, step=step, hero=hero)
        stats = run_league_selfplay(
            self.cfg, evaluator, out_dir, games=games, seed=seed, hero=hero, sample=sample,
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
        if self.tracker is not None:
            self.tracker.log_selfplay(summary)
        self.evaluator.poll()
        return stats

    # ----- the checkpointer and the evaluator --------------------------------------------
    def after_train(self, it: int, candidate: Path) -> AgentInfo | None:
        """Add iteration ``it``'s candidate by the schedule; submit its rating when due."""
        name = checkpoint_name(it)
        step = it * self.cfg.train.steps
        state = self.registry.load()
        agent = state.agents.get(name)  # already there when a killed run resumes
        if agent is None:
            hero = hero_name(self.run)
            agent = promote_if_scheduled(
                self.registry, name=name, path=os.path.relpath(candidate, self.run.root),
                step=step, current_elo=self._hero_elo(state, hero),
                parent=hero if hero in state.agents else None, events=self.events,
            )  # fmt: skip
        if agent is not None and it % self.league_cfg.eval_every == 0:
            self._submit(name, step)
        self.evaluator.poll()
        return agent

    def end_iteration(self, it: int) -> None:
        """Reap finished evaluations, redraw the Elo chart and log new ratings."""
        self.evaluator.poll()
        self.events.emit("league.iteration_done", iteration=it, step=it * self.cfg.train.steps)
        self._refresh_outputs()

    def close(self, timeout: float = 900.0) -> None:
        """Wait for the evaluator's last job, then write the final chart and logs."""
        self.evaluator.close(timeout)
        self._refresh_outputs()
        if self.tracker is not None:
            self.tracker.finish()
        self.events.close()

    def _rated(self, name: str) -> bool:
        return any(name in r.agents for r in self.matchlog.read(kind="evaluation"))

    def _submit(self, name: str, step: int) -> None:
        # Never rate a checkpoint twice (a resumed iteration may ask again): its games would
        # count double in the refit.
        if name in self._submitted or self._rated(name):
            return
        self._submitted.add(name)
        state = self.registry.load()
        keepers = choose_gatekeepers(state, name)
        keepers += [g for g in self.league_cfg.eval_extra_gatekeepers if g in state.agents]
        keepers = [g for g in dict.fromkeys(keepers) if g != name]
        self.evaluator.submit(step, name, gatekeepers=keepers)

    def _resubmit_unrated(self) -> None:
        # A run killed while its evaluator ran lost that job: rate the newest checkpoint again
        # if it has no evaluation games yet (the evaluator only ever rates the newest anyway).
        latest = self.registry.load().latest_checkpoint
        if latest is None or latest.step is None:
            return
        iteration = latest.step // self.cfg.train.steps
        if iteration % self.league_cfg.eval_every == 0:
            self._submit(latest.name, latest.step)

    @staticmethod
    def _hero_elo(state: LeagueState, hero: str) -> float:
        if hero in state.agents:
            return state.agents[hero].elo
        latest = state.latest_checkpoint
        if latest is not None:
            return latest.elo
        return state.anchor[1] if state.anchor else 1000.0

    def _refresh_outputs(self) -> None:
        events = self.paths["events"]
        if any(True for _ in read_events(events, ELO_UPDATED)):
            plot_elo(events, self.run.root / "league_elo.png")
        if self.tracker is not None:
            self.tracker.log_new_ratings(events)


class WandbTracker:
    """WandB logging of the league (optional ``wandb`` extra; ``offline`` needs no network).

    Every metric is plotted against ``league/step`` (the hero's training step), declared with
    ``define_metric``, so an evaluator result that arrives late still lands at its step:
    ``League/Elo_Rating/{Hero,Past_Best,Baseline_<name>}`` scalars and a ``League/Elo_Rating``
    line-series chart, ``League/opponent_share/<type>``, ``League/bucket_share/<bucket>`` and
    ``League/win_rate/<type>`` per iteration.
    """

    def __init__(self, cfg: YatzyConfig, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError:
            raise RuntimeError(
                "league.wandb is true but wandb is not installed: pip install 'leaguezero[wandb]'"
                " or set league.wandb=false"
            ) from None
        self.wandb = wandb
        self.run = wandb.init(
            project="leaguezero", name=cfg.run.name, dir=str(run_dir),
            mode=cfg.league.wandb_mode, config=cfg.model_dump(mode="json"),
            id=f"{cfg.run.name}-{_digest(Path(run_dir).resolve())}",  # same id on --resume
            resume="allow",
        )  # fmt: skip
        self.run.define_metric("league/step")
        self.run.define_metric("League/*", step_metric="league/step")
        self._seen = 0

    def log_selfplay(self, summary: dict[str, Any]) -> None:
        games = max(1, summary["games"])
        row: dict[str, Any] = {"league/step": summary["step"]}
        for kind, n in summary["opponent_types"].items():
            row[f"League/opponent_share/{kind}"] = n / games
        for bucket, n in summary["buckets"].items():
            row[f"League/bucket_share/{bucket}"] = n / games
        for kind, rate in summary["hero_win_rate_by_type"].items():
            row[f"League/win_rate/{kind}"] = rate
        self.run.log(row)

    def log_new_ratings(self, events_path: Path) -> None:
        from leaguezero.league.tracking import elo_series

        new = list(read_events(events_path, ELO_UPDATED))[self._seen :]
        if not new:
            return
        self._seen += len(new)
        for event in new:
            ratings = event["ratings"]
            row: dict[str, Any] = {"league/step": event["step"]}
            if event.get("challenger") in ratings:
                row["League/Elo_Rating/Hero"] = ratings[event["challenger"]]
            for name in event.get("baselines", []):
                if name in ratings:
                    row[f"League/Elo_Rating/Baseline_{name}"] = ratings[name]
            self.run.log(row)
        series = elo_series(events_path)
        steps = sorted({s for points in series.values() for s, _ in points})
        lines, keys = [], []
        for key, points in series.items():
            if points:
                values = dict(points)
                last = None
                filled = []
                for s in steps:  # forward-fill so every line spans the same x values
                    last = values.get(s, last)
                    filled.append(last if last is not None else float("nan"))
                lines.append(filled)
                keys.append(key)
        if steps and lines:
            chart = self.wandb.plot.line_series(
                xs=steps, ys=lines, keys=keys, title="League/Elo_Rating", xname="training step"
            )
            self.run.log({"League/Elo_Rating": chart, "league/step": steps[-1]})
        past_best = series.get("Past_Best") or []
        if past_best:
            self.run.log({"league/step": past_best[-1][0],
                          "League/Elo_Rating/Past_Best": past_best[-1][1]})  # fmt: skip

    def finish(self) -> None:
        self.run.finish()
