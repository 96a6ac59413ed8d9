"""The Diplomacy league loop: PFSP opponents, GRPO updates of the hero, checkpoints, async Elo.

The league itself — registry, match log, PFSP matchmaker, win rates, the live hero's rating,
checkpointer, retirement, the async evaluator, events/WandB/PNG — is a
:class:`~leaguezero.league.session.LeagueSession`; this module gives it Diplomacy's baselines
and tournament and plays the games. One step (``leaguezero diplomacy train``;
docs/guides/diplomacy_training.md):

1. for each of ``groups_per_step`` groups the session draws the opponents (PFSP over
   ``league.json``, with the live hero's own rating; cold start: the baselines only,
   :data:`~.league_eval.BASELINES`) and logs each draw as ``league.opponent_sampled``; six
   draws fill the six other seats, or ``max_unique_opponents`` draws are cloned with cluster
   seating;
2. the group's ``group_size`` games share opponents and seating (the hero's power rotates per
   group) and differ in seeds; the live hero (``hero``, also every mirror seat) samples with its
   actor; the hero power's records train, and with ``train.learn_from: live_seats`` also every
   mirror seat's (one GRPO group per seat, each with its own scores);
3. the session logs the games and rates the live hero from them (online Elo against the
   opponents' ratings);
4. :class:`~leaguezero.diplomacy.train.grpo.GRPOTrainer` updates the hero from the group-relative
   advantages of its final scores (``train.credit: phase``: of the score gained from each
   phase on);
5. the session's checkpointer saves ``checkpoints/ckpt_NNNNNN.pt`` and adds it to the league
   when the schedule says so (first, every 10 steps, every 100, or a new best rating); stale
   curriculum snapshots are retired (``league.checkpoints_retired``);
6. every ``league.eval_every`` steps the session has the async evaluator rate the newest
   checkpoint against the gatekeepers in the background (training goes on): the league's
   picks plus the fixed benchmark suite's opponents
   (:func:`~.league_eval.evaluation_gatekeepers`), each
   evaluation recording the challenger's win rate and floor per suite opponent;
7. the trainer state (weights, optimizer, matchmaker RNG, win-rate table, the hero's rating,
   the evaluations not finished yet, step) is written atomically to ``state.pt``, so a killed
   run resumes from the last finished step: the session takes the training games of later
   steps out of the match log and submits the pending evaluations again
   (:meth:`~leaguezero.league.session.LeagueSession.resume`); then the session logs
   ``league.step_summary`` (and WandB with ``league.wandb``).

The hero is a :class:`~leaguezero.diplomacy.train.heroes.Hero`: the small policy network
(:mod:`.network_hero`) or an LLM's LoRA adapter (:mod:`.llm_hero`). Backends come from the
caller (the command line): a task map for the hero's games and a job runner for the evaluator;
both default to this machine.

Files in the run directory: ``config.yaml``, ``league.json``, ``league_matches.ndjson``
(training and evaluation games), ``events.ndjson`` (league events and ``diplomacy.train_step``
metrics), ``checkpoints/``, ``state.pt``, ``elo.png``, ``final`` (the last step's hero: a
folder, or ``final.pt``); ``lineage.json`` (and, for an LLM hero,
``init_adapter/``) when the run started from a saved agent (``--init-from``, :mod:`.lineage`).
"""

from __future__ import annotations

import dataclasses
import io
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leaguezero.az.checkpoint import torch_load_reason
from leaguezero.common.atomic import atomic_write_bytes
from leaguezero.common.config import write_resolved_config
from leaguezero.common.crashpoint import crash_point
from leaguezero.common.memory import rss_mb
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentKind, Seating, with_base_model
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.records import PlayedGame
from leaguezero.diplomacy.train.grpo_loss import mismatch_warning
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings, scheduled_lr
from leaguezero.diplomacy.train.hero_setup import init_source, make_hero
from leaguezero.diplomacy.train.heroes import Hero, TaskMap, local_map
from leaguezero.diplomacy.train.heroes import TrainError as TrainError
from leaguezero.diplomacy.train.league_eval import (
    GAME,
    league_session,
)
from leaguezero.diplomacy.train.lineage import (
    LineageError,
    checkpoint_lineage,
    read_lineage,
    write_lineage,
)
from leaguezero.diplomacy.train.value_loss import grpo_trainer
from leaguezero.league.evaluator import JobRunner
from leaguezero.league.types import MatchResult, Participant

STATE_FORMAT = "leaguezero.diplomacy.train_state"
STATE_SCHEMA_VERSION = 1
TRAIN_STEP_EVENT = "diplomacy.train_step"
NOTHING_TRAINED_EVENT = "diplomacy.train_nothing"  # a step whose groups gave no advantage
MISMATCH_EVENT = "diplomacy.sampler_mismatch"  # the sampler's log-probs far from the trainer's


class LeagueTrainer:
    """Holds a run's pieces; :meth:`run` trains up to ``cfg.train.steps`` (see module doc).

    Args:
        cfg: the run's config.
        run_dir: the run directory (created).
        resume: continue the run in ``run_dir`` from ``state.pt``.
        init_from: a new run starts from this saved agent (``--init-from``: a checkpoint, an
            adapter folder, a run folder or ``pretrained``; :mod:`.lineage`), which is also the
            KL reference; ``RUN/lineage.json`` and every checkpoint record the chain.
        task_map: how the network hero's games are played (:func:`~.heroes.local_map`, or
            ``leaguezero.distributed.tasks.RayTaskMap``).
        eval_runner: where evaluation jobs run (default: a local process per job).
    """

    def __init__(
        self,
        cfg: DiplomacyConfig,
        run_dir: str | Path,
        *,
        resume: bool = False,
        init_from: str | Path | None = None,
        task_map: TaskMap = local_map,
        eval_runner: JobRunner | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.state_path = self.run_dir / "state.pt"
        self.ckpt_dir = self.run_dir / "checkpoints"
        if self.state_path.exists() and not resume:
            raise TrainError(
                f"{self.run_dir} already holds a run (state.pt); pass --resume to continue it "
                "or choose another --out"
            )
        cfg = with_base_model(cfg)  # llm.base_model: pretrained-llm, smollm2 (AgentSpecError)
        source, cfg = init_source(cfg, init_from, resume)  # checked before anything is written
        self.cfg = cfg
        tcfg = cfg.train
        fresh = not self.run_dir.exists()
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.hero: Hero = make_hero(cfg, self.ckpt_dir, task_map)
        if source is not None:
            try:
                self.hero.start_from(source.path)
            except TrainError:  # e.g. an adapter of another LoRA shape: leave no half run
                self.hero.close()
                if fresh:
                    shutil.rmtree(self.run_dir, ignore_errors=True)
                raise
            write_lineage(self.run_dir, source.record)
        try:
            self.lineage = read_lineage(self.run_dir)
        except LineageError as err:
            raise TrainError(str(err)) from None
        self._step_games: list[PlayedGame] = []  # this step's games (the hero's step stats)
        self.policy = self.hero.policy
        write_resolved_config(cfg, self.run_dir)
        self.session = league_session(cfg, self.run_dir, self.hero.base_model_path, eval_runner)
        self.registry = self.session.registry
        self.evaluator = self.session.evaluator
        # The trainer's settings, made once here (the hero sizes train.records_per_pass: 0).
        self.grpo = GRPOSettings.from_config(
            cfg, records_per_pass=self.hero.records_per_pass, trim_above_gb=self.hero.trim_above_gb
        )
        reference = self.hero.reference() if self.grpo.kl_coef > 0 else None
        # With a value head: its MSE too (.value_loss).
        self.trainer = grpo_trainer(self.policy, self.grpo, reference=reference)
        self.exploiters = None  # league.exploiters: AlphaStar's roles beside the hero
        ecfg = cfg.league.exploiters
        if ecfg.main or ecfg.league:
            from leaguezero.diplomacy.train.exploiters import ExploiterLeague

            base = getattr(self.hero, "base_path", self.ckpt_dir / "base_model.pt")
            self.exploiters = ExploiterLeague(
                cfg, self.grpo, self.run_dir, self.session, base, task_map
            )
        if self.hero.memory_plan is not None and not tcfg.records_per_pass:
            self.session.events.emit("diplomacy.memory_plan", message=self.hero.memory_plan)
        self.step = 0
        if resume and self.state_path.exists():
            self._load_state()
            self.session.events.emit("diplomacy.train_resumed", step=self.step)
        self.saved_step = self.step  # the last step in state.pt (what --resume goes on from)
        # Steps after the saved state are played again: their training games leave the match
        # log, and the evaluations the state had pending run again (LeagueSession.resume).
        self.session.resume(self.step)
        # Training games are many and short: keep them in memory only.
        self.game_cfg = cfg.model_copy(update={"games_dir": None, "record_observations": False})

    # ----- state ----------------------------------------------------------------------------
    def _save_state(self) -> None:
        buffer = io.BytesIO()
        torch.save(
            {
                "format": STATE_FORMAT,
                "schema_version": STATE_SCHEMA_VERSION,
                "step": self.step,
                "agent": self.hero.agent,
                "policy": self.hero.weights(),
                "trainer": self.trainer.state_dict(),
                "lineage": self.lineage,  # where the run started (None: fresh weights)
                "exploiters": None if self.exploiters is None else self.exploiters.state_dict(),
                **self.session.state_dict(),
            },
            buffer,
        )
        atomic_write_bytes(self.state_path, buffer.getvalue())
        self.saved_step = self.step

    def _load_state(self) -> None:
        try:
            # weights_only: the file holds tensors and plain values only, so a planted state.pt
            # cannot run code on --resume (as every other load in leaguezero).
            data = torch.load(self.state_path, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated, foreign, or a pickle that wants to run code
            reason = torch_load_reason(err)
            raise TrainError(
                f"{self.state_path} is unreadable or unsafe ({reason}); restore it from a backup "
                "or start a new run"
            ) from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise TrainError(f"{self.state_path} is not a Diplomacy training state")
        if data.get("schema_version") != STATE_SCHEMA_VERSION:
            raise TrainError(
                f"{self.state_path} has schema_version {data.get('schema_version')!r}, this "
                f"leaguezero reads {STATE_SCHEMA_VERSION}; resume with a matching version"
            )
        agent = data.get("agent", "policy")  # files from before the LLM hero are policy runs
        if agent != self.hero.agent:
            raise TrainError(
                f"{self.state_path} holds a train.agent={agent} run; resume it with that agent"
            )
        self.hero.load_weights(data["policy"])
        self.trainer.load_state_dict(data["trainer"])
        self.session.load_state_dict(data)
        if self.exploiters is not None and data.get("exploiters") is not None:
            self.exploiters.load_state_dict(data["exploiters"])
        self.step = int(data["step"])

    # ----- one step -------------------------------------------------------------------------
    # Whether the session's async evaluator rates the newest checkpoint every eval_every steps
    # (an exploiter's run measures itself otherwise: .exploit).
    league_evaluation = True

    def opponent_names(self, step: int, n_draws: int) -> list[str]:
        """The names of one group's ``n_draws`` opponents: PFSP draws over the league (each
        logged as ``league.opponent_sampled``); an exploiter's run fixes them (.exploit)."""
        return [d.opponent for d in self.session.sample(step, n_draws)]

    def learning_seats(
        self, games: list[PlayedGame], seating: Seating, hero_power: str
    ) -> list[str]:
        """The powers whose records train this group: the hero power, and with
        ``learn_from: live_seats`` every other power the live hero sat at in all its games."""
        if not self.cfg.train.mirrors_learn:
            return [hero_power]
        mirrors = [
            p
            for p in POWERS
            if p != hero_power
            and all((g.seating or seating)[p].kind is AgentKind.HERO for g in games)
        ]
        return [hero_power, *mirrors]

    def play_group(
        self, group_idx: int, seating: Seating, hero_power: str
    ) -> tuple[list[list[PlayedGame]], list[MatchResult]]:
        """One GRPO group: per learning seat (the hero power first, then with
        ``train.learn_from: live_seats`` each mirror seat) the G games read at that seat, and
        the games as training match results."""
        games = self.hero.play_group(self.game_cfg, self.registry, group_idx, seating, hero_power)
        self._step_games.extend(games)
        samples = [
            [dataclasses.replace(game, seat=power) for game in games]
            for power in self.learning_seats(games, seating, hero_power)
        ]
        results = [
            MatchResult(
                participants=tuple(
                    Participant((game.seating or seating)[p].name, p, game.scores[p])
                    for p in POWERS
                ),
                step=self.step,
                timestamp=time.time(),
                game=GAME,
                kind="training",
                meta={"hero_power": hero_power, "seed": game.seed, "group": group_idx},
            )
            for game in games
        ]
        return samples, results

    def train_step(self) -> dict[str, Any]:
        """Play this step's groups, update the hero (or, every ``league.exploiters.every``
        steps, an exploiter: :mod:`.exploiters`), checkpoint, and maybe evaluate."""
        if self.exploiters is not None and self.exploiters.due(self.step + 1):
            return self._exploiter_step()
        started, started_cpu = time.perf_counter(), time.process_time()
        self.step += 1
        step, tcfg, session = self.step, self.cfg.train, self.session
        n_draws = min(self.cfg.max_unique_opponents, len(POWERS) - 1)
        groups, hero_groups, results, opponents, powers = [], [], [], [], []
        self._step_games = []
        for g in range(tcfg.groups_per_step):
            group_idx = (step - 1) * tcfg.groups_per_step + g
            names = self.opponent_names(step, n_draws)
            hero_power = POWERS[group_idx % len(POWERS)]
            seating = self.hero.seating(names, hero_power, random.Random(group_idx))
            samples, played = self.play_group(group_idx, seating, hero_power)
            hero_groups.append(samples[0])
            groups.extend(samples)
            results.extend(played)
            opponents.append(names)
            powers.append(hero_power)
        session.record(step, results)
        crash_point("diplomacy.recorded", step)
        play_seconds = time.perf_counter() - started
        lr = scheduled_lr(tcfg.lr, step, tcfg.steps, tcfg.lr_schedule, tcfg.lr_final)
        self.trainer.set_lr(lr)
        seed = self.cfg.run.seed * 1_000_003 + step
        metrics = self.trainer.step(groups, seed=seed, global_step=step)  # logs its kl_coef
        metrics["lr"] = lr
        # The curve's score is the hero power's (mirror seats' scores only train).
        hero_scores = [game.score for group in hero_groups for game in group]
        metrics["score_mean"] = float(np.mean(hero_scores))
        metrics["score_std"] = float(np.std(hero_scores))

        added = self._checkpoint(step)
        retired = session.retire(step)
        record = {
            "step": step,
            **{k: round(v, 6) for k, v in metrics.items()},
            "hero_elo": round(session.hero_elo, 2),
            "hero_powers": powers,
            # The rewards' spread within each group: what the advantages were normalised by.
            "reward_spread": round(
                float(np.mean([np.std([g.score for g in group]) for group in hero_groups])),
                4,
            ),
            "learning_seats": len(groups),
            **self.hero.step_stats(self._step_games),
            "opponents": opponents,
            "checkpoint_added": None if added is None else added.name,
            "retired": retired,
            "play_seconds": round(play_seconds, 3),
            "seconds": round(time.perf_counter() - started, 3),
            # This process's CPU over the step, all its threads (the games' and the trainer's;
            # Ray workers' and a server's not): wall time on a shared machine says little.
            "cpu_seconds": round(time.process_time() - started_cpu, 3),
            "rss_mb": rss_mb(),  # the stability check: no growth over a long run
        }
        self._warn(step, metrics, record)
        # The step's event goes out before the state that marks the step done: a kill in
        # between redoes the step, and the report drops events past the resume point, so the
        # step is logged exactly once either way (state first could lose its event).
        session.events.emit(TRAIN_STEP_EVENT, **record)
        self._end_step(step)
        return record

    def _warn(self, step: int, metrics: dict[str, float], record: dict[str, Any]) -> None:
        """Add the step's warning to ``record`` and the event log: a step that trained nothing,
        or one whose sampler's log-probs were far from the trainer's."""
        tcfg = self.cfg.train
        if not metrics["records"]:
            # Nothing to learn from: every group's games scored alike (or no hero records).
            # Said out loud, so a smoke run of that shape cannot pass for a trained step.
            record["warning"] = (
                f"step {step} trained nothing: every group's rewards were equal (reward spread "
                "0), so no record had an advantage; longer games, larger groups or more groups "
                "per step give the rewards room to differ"
            )
            self.session.events.emit(NOTHING_TRAINED_EVENT, step=step, message=record["warning"])
        elif warning := mismatch_warning(metrics, tcfg.is_warn_share, tcfg.is_cap):
            record["warning"] = f"step {step}: {warning}; train.is_correction {tcfg.is_correction}"
            self.session.events.emit(MISMATCH_EVENT, step=step, message=record["warning"])

    def _checkpoint(self, step: int):
        """Save the hero's checkpoint when the session's schedule says so (with its lineage);
        the league agent added, or None."""
        suffix = self.hero.checkpoint_suffix
        extra = checkpoint_lineage(
            self.run_dir, self.lineage, step, self.cfg.model_dump(mode="json")
        )
        return self.session.checkpoint(
            step, lambda name: self.hero.save(self.ckpt_dir / f"{name}{suffix}", extra)
        )

    def save_final(self) -> Path:
        """The live hero at the current step, with its lineage, as ``RUN/final`` (a policy file
        ``final.pt``, an adapter folder ``final``): what a stage hands the next one
        (``--init-from RUN/final``), since the schedule keeps only some steps. A run stopped
        early keeps it too: ``--resume --set train.steps=N`` at its current N saves it and
        stops."""
        extra = checkpoint_lineage(
            self.run_dir, self.lineage, self.step, self.cfg.model_dump(mode="json")
        )
        return self.hero.save(self.run_dir / f"final{self.hero.checkpoint_suffix}", extra)

    def _end_step(self, step: int) -> None:
        # The evaluation is submitted before the state is saved, so the state lists it among
        # the pending ones until it finishes: a kill after the save (the last step's
        # included) has the resumed run submit it again, a kill before redoes the step.
        if self.league_evaluation:
            self.session.maybe_evaluate(step)
        self._save_state()
        self.session.end_step(step)
        crash_point("diplomacy.step_done", step)

    def _exploiter_step(self) -> dict[str, Any]:
        """An exploiter's step (:mod:`.exploiters`): its games and update; the hero's
        checkpoint, retirement and evaluation rules run as on any step (the hero unchanged)."""
        self.step += 1
        step, session = self.step, self.session
        assert self.exploiters is not None
        record, results = self.exploiters.train_step(
            step, self.policy, self.game_cfg, session.hero_elo
        )
        session.matchlog.extend(results)  # not the hero's win rates or rating: it did not learn
        crash_point("diplomacy.recorded", step)
        added = self._checkpoint(step)
        record["hero_elo"] = round(session.hero_elo, 2)
        record["checkpoint_added"] = None if added is None else added.name
        record["retired"] = session.retire(step)
        self._end_step(step)
        return record

    def run(self, on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until ``cfg.train.steps``; save the last step's hero as ``RUN/final`` (``.pt``
        for a policy hero; whatever the checkpoint schedule kept); wait for the last
        evaluation; plot the Elo chart."""
        wait_s = 900.0  # the last evaluation's bound
        try:
            while self.step < self.cfg.train.steps:
                record = self.train_step()
                if on_step is not None:
                    on_step(record)
            self.save_final()
        except KeyboardInterrupt:
            wait_s = 0.0  # stop a running evaluation: the saved state resubmits it on --resume
            raise
        finally:
            self.session.close(wait_s)
            self.hero.close()
        from leaguezero.diplomacy.train.report import write_report

        write_report(self.run_dir)
        return {"step": self.step, "run_dir": str(self.run_dir)}
