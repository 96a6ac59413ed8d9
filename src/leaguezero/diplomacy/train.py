"""The Diplomacy league loop: PFSP opponents, GRPO updates of the hero, checkpoints, async Elo.

One step (``leaguezero diplomacy train``; docs/diplomacy_training.md):

1. for each of ``groups_per_step`` groups the matchmaker draws the opponents (PFSP over
   ``league.json``; cold start: baselines ``base_model``, ``random_bot``, ``chaos_bot`` only)
   and logs each draw as ``league.opponent_sampled``; six draws fill the six other seats, or
   ``max_unique_opponents`` draws are cloned with cluster seating;
2. the group's ``group_size`` games share opponents and seating (the hero's power rotates per
   group) and differ in seeds; the live hero (``hero``, also every mirror seat) samples with its
   actor, and only the hero power's records are kept;
3. :class:`~leaguezero.diplomacy.grpo.GRPOTrainer` updates the hero from the group-relative
   advantages of its final scores;
4. the checkpointer saves ``checkpoints/hero_vNNNN.pt`` and adds it to the league when the
   schedule says so (``promote_if_scheduled``; the first one's parent is ``base_model``);
   curriculum snapshots that left the last 100 steps are retired (``extra["retired"]``,
   ``league.checkpoints_retired``) so they are no longer drawn;
5. the trainer state (weights, optimizer, matchmaker RNG, win-rate table, step) is written
   atomically to ``state.pt``, so a killed run resumes from the last finished step;
6. every ``league.eval_every`` steps the async evaluator rates the newest checkpoint against
   the gatekeepers in a background process (training goes on).

The hero is the small policy network (``train.agent: policy``) or, with ``train.agent: llm``,
a LoRA adapter on ``llm.base_model`` (:class:`~leaguezero.diplomacy.llm.league.LLMLeagueHero`:
hf backend in this process, opponents' adapters loaded by league name, one batched table per
game, checkpoints as adapter folders ``checkpoints/hero_vNNNN/``).

Files in the run directory: ``config.yaml``, ``league.json``, ``league_matches.ndjson``
(training and evaluation games), ``events.ndjson`` (league events and ``diplomacy.train_step``
metrics), ``checkpoints/``, ``state.pt``, ``elo.png``.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from leaguezero.az.checkpoint import torch_load_reason
from leaguezero.common.atomic import atomic_write_bytes
from leaguezero.common.config import write_resolved_config
from leaguezero.common.events import EventWriter
from leaguezero.diplomacy.agents import BASE_MODEL, UnknownAgentError
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.env import POWERS
from leaguezero.diplomacy.grpo import GameSample, GRPOPolicy, GRPOTrainer
from leaguezero.diplomacy.league_eval import GAME, TOURNAMENT
from leaguezero.diplomacy.policy import DiplomacyPolicy, NetActor, PolicyConfig, load_policy
from leaguezero.diplomacy.rollout import run_rollout
from leaguezero.league.evaluator import AsyncEvaluator, choose_gatekeepers, evaluator_paths
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import PFSPMatchmaker, WinRateTable, cluster_seating
from leaguezero.league.registry import LeagueRegistry, LeagueState
from leaguezero.league.schedule import (
    promote_if_scheduled,
    promotion_reasons,
    retire_candidates,
)
from leaguezero.league.tracking import emit_opponents_sampled, plot_elo
from leaguezero.league.types import MatchResult, Participant

if TYPE_CHECKING:
    from leaguezero.diplomacy.llm.league import LLMLeagueHero

HERO = "hero"  # the live, training weights (the mirror bucket's name)
STATE_FORMAT = "leaguezero.diplomacy.train_state"
STATE_SCHEMA_VERSION = 1
TRAIN_STEP_EVENT = "diplomacy.train_step"
RETIRED_EVENT = "league.checkpoints_retired"


class TrainError(RuntimeError):
    """A run directory that cannot be started or resumed (the message says what to do)."""


def checkpoint_name(step: int) -> str:
    """Immutable league name of the hero after ``step`` updates (``hero_v0050``)."""
    return f"hero_v{step:04d}"


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


class LeagueTrainer:
    """Holds a run's pieces; :meth:`run` trains up to ``cfg.train.steps`` (see module doc)."""

    def __init__(
        self,
        cfg: DiplomacyConfig,
        run_dir: str | Path,
        *,
        resume: bool = False,
        backend: str = "local",
        ray_address: str | None = None,
    ):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        paths = evaluator_paths(self.run_dir)
        self.registry_path, self.matchlog_path = paths["registry"], paths["matchlog"]
        self.events_path = paths["events"]
        self.state_path = self.run_dir / "state.pt"
        self.ckpt_dir = self.run_dir / "checkpoints"
        if self.state_path.exists() and not resume:
            raise TrainError(
                f"{self.run_dir} already holds a run (state.pt); pass --resume to continue it "
                "or choose another --out"
            )
        torch.set_num_threads(1)  # one core's work per process (see DESIGN: shared cores)
        tcfg, lcfg = cfg.train, cfg.league
        self.llm: LLMLeagueHero | None = None
        self.policy: GRPOPolicy
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        base_path = self.ckpt_dir / f"{BASE_MODEL}.pt"
        if tcfg.agent == "llm":
            self.llm = self._build_llm_hero(cfg, backend)
            self.policy = self.llm.hero
        else:
            self.policy = DiplomacyPolicy(PolicyConfig(tcfg.hidden, tcfg.layers), seed=tcfg.seed)
            if not base_path.exists():
                self.policy.save(base_path)  # step 0: the base model is the initial policy
        write_resolved_config(cfg, self.run_dir)
        self.registry = LeagueRegistry.create(
            self.registry_path,
            run_name=self.run_dir.name,
            baselines={
                "random_bot": lcfg.random_bot_elo,
                BASE_MODEL: lcfg.base_model_elo,
                "chaos_bot": lcfg.chaos_bot_elo,
            },
            anchor="random_bot",
        )
        if self.llm is None:  # an LLM run's base_model is the base LM itself (no path)
            with self.registry.update() as state:
                state.agents[BASE_MODEL].path = f"checkpoints/{BASE_MODEL}.pt"
        reference = load_policy(base_path) if tcfg.kl_coef > 0 else None
        self.trainer = GRPOTrainer(
            self.policy,
            lr=tcfg.lr,
            clip_eps=tcfg.clip_eps,
            kl_coef=tcfg.kl_coef,
            epochs=tcfg.epochs,
            max_grad_norm=tcfg.max_grad_norm,
            reference=reference,
        )
        self.matchmaker = PFSPMatchmaker(
            shares=lcfg.bucket_shares(),
            peer_window=lcfg.peer_window,
            weighting=lcfg.weighting,
            mode=lcfg.mode,
            min_checkpoints=lcfg.min_checkpoints,
            seed=tcfg.seed,
        )
        self.win_rates = WinRateTable()
        self.step = 0
        self.events = EventWriter(self.events_path)
        if resume and self.state_path.exists():
            self._load_state()
            dropped = self.registry.reconcile()
            if dropped:
                self.events.emit("league.checkpoints_dropped", agents=dropped)
            self.events.emit("diplomacy.train_resumed", step=self.step)
        self.matchlog = MatchLog(self.matchlog_path)
        make_evaluator = AsyncEvaluator
        if backend == "ray":  # rollouts and the evaluator as Ray tasks (docs/cluster.md)
            from leaguezero.distributed.diplomacy_rollouts import RayGroupPlayer
            from leaguezero.distributed.evaluator import league_evaluator_factory

            make_evaluator = league_evaluator_factory("ray", ray_address)
            self._play_group = RayGroupPlayer(self, ray_address).play_group
        elif backend != "local":
            raise TrainError(f"backend {backend!r}: use 'local' or 'ray'")
        self.evaluator = make_evaluator(
            registry_path=self.registry_path,
            matchlog_path=self.matchlog_path,
            events_path=self.events_path,
            tournament=TOURNAMENT,
            tournament_kwargs={
                "config": cfg.model_dump(mode="json"),
                "games_per_gatekeeper": lcfg.eval_games,
                "greedy": lcfg.eval_greedy,
            },
            every=lcfg.eval_every,
            method=lcfg.rating,
            elo_k=cfg.elo_k,
            bootstrap=lcfg.bootstrap,
            seed=tcfg.seed,
        )
        # Training games are many and short: keep them in memory only.
        self.game_cfg = cfg.model_copy(update={"games_dir": None, "record_observations": False})
        self._opponents: dict[str, DiplomacyPolicy] = {}

    @staticmethod
    def _build_llm_hero(cfg: DiplomacyConfig, backend: str) -> LLMLeagueHero:
        from leaguezero.diplomacy.llm.client import LLMError
        from leaguezero.diplomacy.llm.league import LLMLeagueHero

        if backend != "local":
            raise TrainError("train.agent=llm runs with --backend local only (for now)")
        if cfg.train.kl_coef > 0:
            raise TrainError("train.kl_coef > 0 is not supported with train.agent=llm; set it to 0")
        try:
            return LLMLeagueHero(cfg, hero_name=HERO)
        except LLMError as err:
            raise TrainError(str(err)) from None

    # ----- state ----------------------------------------------------------------------------
    def _hero_weights(self) -> dict[str, torch.Tensor]:
        if self.llm is not None:
            return self.llm.weights()
        return self.policy.net.state_dict()

    def _save_state(self) -> None:
        buffer = io.BytesIO()
        torch.save(
            {
                "format": STATE_FORMAT,
                "schema_version": STATE_SCHEMA_VERSION,
                "step": self.step,
                "agent": self.cfg.train.agent,
                "policy": self._hero_weights(),
                "trainer": self.trainer.state_dict(),
                "matchmaker_rng": self.matchmaker.rng.bit_generator.state,
                "win_rates": self.win_rates.to_dict(),
            },
            buffer,
        )
        atomic_write_bytes(self.state_path, buffer.getvalue())

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
        if agent != self.cfg.train.agent:
            raise TrainError(
                f"{self.state_path} holds a train.agent={agent} run; resume it with that agent"
            )
        if self.llm is not None:
            self.llm.load_weights(data["policy"])
        else:
            self.policy.net.load_state_dict(data["policy"])
        self.trainer.load_state_dict(data["trainer"])
        self.matchmaker.rng.bit_generator.state = data["matchmaker_rng"]
        self.win_rates = WinRateTable.from_dict(data["win_rates"])
        self.step = int(data["step"])

    # ----- one step -------------------------------------------------------------------------
    def _opponent_policy(self, name: str) -> DiplomacyPolicy:
        if name not in self._opponents:
            agent = self.registry.load().agents.get(name)
            if agent is None or agent.path is None:
                raise UnknownAgentError(f"league agent {name!r} has no checkpoint path")
            self._opponents[name] = load_policy(self.registry.resolve(agent.path))
        return self._opponents[name]

    def _seating(self, names: list[str], hero_power: str, rng: random.Random) -> dict[str, str]:
        hero_seat = POWERS.index(hero_power)
        if self.llm is not None:  # distinct adapters at the table must fit llm.max_loras
            from leaguezero.diplomacy.llm.adapters import fit_seating
            from leaguezero.diplomacy.llm.league import uses_adapter

            seats = fit_seating(
                HERO,
                names,
                max_loras=self.cfg.llm.max_loras,
                uses_slot=lambda n: n == HERO or uses_adapter(n),
                rng=rng,
                hero_seat=hero_seat,
            )
        elif self.cfg.max_unique_opponents >= len(POWERS) - 1:
            seats = [*names[:hero_seat], HERO, *names[hero_seat:]]
        else:
            seats = cluster_seating(
                HERO, names, len(POWERS), self.cfg.max_unique_opponents, rng, hero_seat
            )
        return dict(zip(POWERS, seats, strict=True))

    def _adapter_paths(self, seating: dict[str, str]) -> dict[str, Path]:
        # Adapter opponents by league name -> their checkpoint folders (LLM runs).
        from leaguezero.diplomacy.llm.league import uses_adapter

        agents = self.registry.load().agents
        paths: dict[str, Path] = {}
        for name in set(seating.values()):
            if name == HERO or not uses_adapter(name):
                continue
            agent = agents.get(name)
            if agent is None or agent.path is None:
                raise UnknownAgentError(f"league agent {name!r} has no adapter folder")
            paths[name] = self.registry.resolve(agent.path)
        return paths

    def _resolver(self, group_idx: int, game_idx: int, hero_actors: list[NetActor]):
        # One call per seat: the live hero (and its mirror seats) get actors of the training
        # weights, collected so the hero power's records can be picked out after the game.
        tcfg = self.cfg.train
        counter = iter(range(len(POWERS)))

        def resolve(name: str | None) -> NetActor:
            seed = _seed(tcfg.seed, group_idx, game_idx, next(counter))
            if name == HERO:
                actor = self.policy.actor(seed=seed, temperature=tcfg.temperature)
                hero_actors.append(actor)
                return actor
            policy = self._opponent_policy(BASE_MODEL if name is None else name)
            return policy.actor(seed=seed, temperature=tcfg.temperature)

        return resolve

    def _play_group(self, group_idx: int, seating: dict[str, str], hero_power: str):
        samples: list[GameSample] = []
        results: list[MatchResult] = []
        tcfg = self.cfg.train
        adapter_paths = self._adapter_paths(seating) if self.llm is not None else {}
        for game_idx in range(tcfg.group_size):
            if self.llm is not None:
                # One table per game: every LLM seat of a phase is sampled in one batch.
                table = self.llm.table(
                    seating,
                    adapter_paths,
                    seed=_seed(tcfg.seed, group_idx, game_idx),
                    temperature=tcfg.temperature,
                )
                game = run_rollout(
                    self.game_cfg,
                    group_idx,
                    game_idx,
                    table.seating,
                    hero_power,
                    resolver=table.resolver,
                )
                records = [r for r in table.records if r.power == hero_power]
            else:
                hero_actors: list[NetActor] = []
                resolve = self._resolver(group_idx, game_idx, hero_actors)
                game = run_rollout(
                    self.game_cfg, group_idx, game_idx, seating, hero_power, resolver=resolve
                )
                records = [r for a in hero_actors for r in a.records if r.power == hero_power]
            samples.append(GameSample(game.scores[hero_power], records))
            results.append(
                MatchResult(
                    participants=tuple(Participant(seating[p], p, game.scores[p]) for p in POWERS),
                    step=self.step,
                    timestamp=time.time(),
                    game=GAME,
                    kind="training",
                    meta={"hero_power": hero_power, "seed": game.seed, "group": group_idx},
                )
            )
        return samples, results

    def train_step(self) -> dict[str, Any]:
        """Play this step's groups, update the hero, checkpoint, and maybe evaluate."""
        started = time.perf_counter()
        self.step += 1
        step, tcfg = self.step, self.cfg.train
        state = self.registry.load()
        latest = state.latest_checkpoint
        hero_elo = latest.elo if latest is not None else state.agents[BASE_MODEL].elo
        n_draws = min(self.cfg.max_unique_opponents, len(POWERS) - 1)
        groups, results, opponents = [], [], []
        for g in range(tcfg.groups_per_step):
            group_idx = (step - 1) * tcfg.groups_per_step + g
            draws = self.matchmaker.sample(state, HERO, hero_elo, n_draws, self.win_rates)
            emit_opponents_sampled(self.events, step, draws)
            hero_power = POWERS[group_idx % len(POWERS)]
            seating = self._seating(
                [d.opponent for d in draws], hero_power, random.Random(group_idx)
            )
            samples, played = self._play_group(group_idx, seating, hero_power)
            groups.append(samples)
            results.extend(played)
            opponents.append([d.opponent for d in draws])
        self.matchlog.extend(results)
        self.win_rates.update_from_matches(results, HERO)
        play_seconds = time.perf_counter() - started
        metrics = self.trainer.step(groups)

        name = checkpoint_name(step)
        added = None
        if name not in state.agents and promotion_reasons(step, hero_elo, state):
            # A policy checkpoint is one .pt file; an LLM checkpoint an adapter folder.
            suffix = "" if self.llm is not None else ".pt"
            path = self.policy.save(self.ckpt_dir / f"{name}{suffix}")
            parent = latest.name if latest is not None else BASE_MODEL
            added = promote_if_scheduled(
                self.registry,
                name=name,
                path=str(path.relative_to(self.run_dir)),
                step=step,
                current_elo=hero_elo,
                parent=parent,
                events=self.events,
            )
        retired = self._retire_stale(step)
        record = {
            "step": step,
            **{k: round(v, 6) for k, v in metrics.items()},
            "hero_elo": hero_elo,
            "opponents": opponents,
            "checkpoint_added": None if added is None else added.name,
            "retired": retired,
            "play_seconds": round(play_seconds, 3),
            "seconds": round(time.perf_counter() - started, 3),
        }
        # The step's event goes out before the state that marks the step done: a kill in
        # between redoes the step, and the report drops events past the resume point, so the
        # step is logged exactly once either way (state first could lose its event).
        self.events.emit(TRAIN_STEP_EVENT, **record)
        self._save_state()
        if step % self.cfg.league.eval_every == 0:
            self._submit_evaluation(step)
        self.evaluator.poll()
        return record

    def _retire_stale(self, step: int) -> list[str]:
        """Stop sampling curriculum snapshots that left the recent window (spec §1).

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

    def _submit_evaluation(self, step: int) -> None:
        state = self.registry.load()
        latest = state.latest_checkpoint
        if latest is None:
            return
        gatekeepers = choose_gatekeepers(state, latest.name)
        if self.cfg.league.eval_all_baselines:
            gatekeepers += [a.name for a in state.baselines if a.name not in gatekeepers]
        self.evaluator.submit(step, latest.name, gatekeepers)

    def run(self, on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until ``cfg.train.steps``; wait for the last evaluation; plot the Elo chart."""
        try:
            while self.step < self.cfg.train.steps:
                record = self.train_step()
                if on_step is not None:
                    on_step(record)
        finally:
            self.evaluator.close()
            self.events.close()
        plot_elo(self.events_path, self.run_dir / "elo.png")
        from leaguezero.diplomacy.train_report import write_report

        write_report(self.run_dir)
        return {"step": self.step, "run_dir": str(self.run_dir)}
