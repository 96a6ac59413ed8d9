"""The two kinds of Diplomacy league hero, behind one interface (:class:`Hero`).

:class:`~leaguezero.diplomacy.train.LeagueTrainer` runs the same loop for both; a hero owns
what differs: its GRPO policy and the reference of the KL term, how the table is seated, how a
group's games are played, its weights in ``state.pt`` and its checkpoint files.

- :class:`NetworkHero` (``train.agent: policy``): the small CPU policy network. A group's games
  are independent jobs of :func:`play_policy_game`, a pure function of plain data (the hero's
  weights, opponents' checkpoint paths, seeds), mapped by the injected ``task_map``: in this
  process (:func:`local_map`) or as Ray tasks (``leaguezero.distributed.tasks.RayTaskMap``,
  chosen by the command line) — the same seeds give the same games either way.
- :class:`LanguageModelHero` (``train.agent: llm``): a LoRA adapter on ``llm.base_model``;
  everything LLM-specific is delegated to
  :class:`~leaguezero.diplomacy.llm.league.LLMLeagueHero` (sampling in process or through an
  OpenAI-compatible server, a group's games played at once, adapter weights, adapter folders as
  checkpoints). Its games run in this process (their requests batch on the sampler).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig, load_policy
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.game.seats import UnknownAgentError
from leaguezero.diplomacy.train.grpo import GRPOPolicy
from leaguezero.league.matchmaker import cluster_seating
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.session import BASE_MODEL, HERO

if TYPE_CHECKING:
    from leaguezero.diplomacy.llm.league import LLMLeagueHero

# task_map(fn, shared, jobs) -> [fn(shared, *job) for job in jobs], in order.
TaskMap = Callable[[Callable[..., Any], Any, Sequence[tuple[Any, ...]]], list[Any]]


class TrainError(RuntimeError):
    """A run directory or config that cannot be trained or resumed (the message says what
    to do)."""


def local_map(fn: Callable[..., Any], shared: Any, jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The in-process task map: each job in turn."""
    return [fn(shared, *job) for job in jobs]


def game_seed(*parts: int) -> int:
    """A seed derived from integers (train seed, group, game, seat)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


@dataclass(frozen=True)
class PlayedGame:
    """One training game: every power's final score, the game's seed, the action records of
    every seat the live hero played (the GRPO samples; ``record.power`` tells the seats apart)
    and each power's running score when each phase began (``RolloutResult.phase_start``)."""

    scores: dict[str, float]
    seed: int
    records: list[Any]
    phase_start: dict[str, dict[str, float]] = field(default_factory=dict)
    # The LLM hero may reseat a table (cluster seating when the server is full), shape its
    # seats' rewards (llm.format_penalty) and count the hero power's order hygiene;
    # None: as given / the scores.
    seating: dict[str, str] | None = None
    rewards: dict[str, float] | None = None
    stats: Any = None

    def reward(self, power: str) -> float:
        """``power``'s GRPO reward: its shaped reward if the hero gave one, else its score."""
        if self.rewards is not None and power in self.rewards:
            return self.rewards[power]
        return self.scores[power]


class Hero(Protocol):
    """What the league loop needs from a hero (see the module doc)."""

    agent: str  # "policy" | "llm" (stored in state.pt; a resume must match)
    policy: GRPOPolicy  # the weights GRPO updates
    checkpoint_suffix: str  # ".pt" for a file, "" for an adapter folder
    base_model_path: str | None  # league path of base_model (None: no file)

    def reference(self) -> GRPOPolicy | None: ...

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> dict[str, str]: ...

    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: dict[str, str],
        hero_power: str,
    ) -> list[PlayedGame]: ...

    def weights(self) -> dict[str, torch.Tensor]: ...

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None: ...

    def save(self, path: Path) -> Path: ...

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]: ...

    def close(self) -> None: ...


# ----- the policy network --------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyGames:
    """What every game of a group shares (shipped once per group to a remote worker)."""

    game_cfg_json: str
    train_seed: int
    temperature: float
    hero_config: PolicyConfig
    hero_state: dict[str, torch.Tensor]
    opponent_paths: dict[str, str]


def play_policy_game(
    shared: PolicyGames,
    group_idx: int,
    game_idx: int,
    seating: dict[str, str],
    hero_power: str,
) -> PlayedGame:
    """One training game of the network hero (a pure function of its arguments).

    Each seat's actor is seeded by (train seed, group, game, seat call); the live hero (and its
    mirror seats) play the shipped weights, league opponents their checkpoint files, bots by
    name. Returns the scores and the records of every live seat.
    """
    game_cfg = DiplomacyConfig.model_validate_json(shared.game_cfg_json)
    hero = DiplomacyPolicy(shared.hero_config)
    hero.net.load_state_dict(shared.hero_state)
    opponents: dict[str, DiplomacyPolicy] = {}
    hero_actors = []
    counter = iter(range(len(POWERS)))

    def resolve(name: str | None):
        seed = game_seed(shared.train_seed, group_idx, game_idx, next(counter))
        if name == HERO:
            actor = hero.actor(seed=seed, temperature=shared.temperature)
            hero_actors.append(actor)
            return actor
        name = BASE_MODEL if name is None else name
        if name not in opponents:
            if name not in shared.opponent_paths:
                raise UnknownAgentError(f"league agent {name!r} has no checkpoint path")
            opponents[name] = load_policy(shared.opponent_paths[name])
        return opponents[name].actor(seed=seed, temperature=shared.temperature)

    game = run_rollout(game_cfg, group_idx, game_idx, seating, hero_power, resolver=resolve)
    records = [r for a in hero_actors for r in a.records]
    return PlayedGame(dict(game.scores), game.seed, records, game.phase_start)


class NetworkHero:
    """The small CPU policy network as the hero (``train.agent: policy``).

    Step 0 saves the initial network as ``checkpoints/base_model.pt`` (the ``base_model``
    baseline, and the KL reference when ``train.kl_coef > 0``).
    """

    agent = "policy"
    checkpoint_suffix = ".pt"

    def __init__(self, cfg: DiplomacyConfig, ckpt_dir: Path, task_map: TaskMap = local_map):
        tcfg = cfg.train
        self.cfg = cfg
        self.task_map = task_map
        self.policy = DiplomacyPolicy(PolicyConfig(tcfg.hidden, tcfg.layers), seed=tcfg.seed)
        self.base_path = ckpt_dir / f"{BASE_MODEL}.pt"
        if not self.base_path.exists():
            self.policy.save(self.base_path)  # step 0: the base model is the initial policy
        self.base_model_path = f"{ckpt_dir.name}/{BASE_MODEL}.pt"

    def reference(self) -> DiplomacyPolicy | None:
        return load_policy(self.base_path) if self.cfg.train.kl_coef > 0 else None

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> dict[str, str]:
        hero_seat = POWERS.index(hero_power)
        if self.cfg.max_unique_opponents >= len(POWERS) - 1:
            seats = [*names[:hero_seat], HERO, *names[hero_seat:]]
        else:
            seats = cluster_seating(
                HERO, names, len(POWERS), self.cfg.max_unique_opponents, rng, hero_seat
            )
        return dict(zip(POWERS, seats, strict=True))

    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: dict[str, str],
        hero_power: str,
    ) -> list[PlayedGame]:
        state = registry.load()
        paths = {}
        for name in {*seating.values(), BASE_MODEL}:
            agent = state.agents.get(name)
            if agent is not None and agent.path is not None:
                paths[name] = str(registry.resolve(agent.path).resolve())
        tcfg = self.cfg.train
        shared = PolicyGames(
            cfg.model_dump_json(),
            tcfg.seed,
            tcfg.temperature,
            self.policy.config,
            {k: v.detach().cpu() for k, v in self.policy.net.state_dict().items()},
            paths,
        )
        jobs = [(group_idx, g, seating, hero_power) for g in range(tcfg.group_size)]
        return self.task_map(play_policy_game, shared, jobs)

    def weights(self) -> dict[str, torch.Tensor]:
        return self.policy.net.state_dict()

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.policy.net.load_state_dict(weights)

    def save(self, path: Path) -> Path:
        return self.policy.save(path)

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]:
        return {}  # every order the network gives is legal

    def close(self) -> None:
        pass


# ----- the LLM -------------------------------------------------------------------------------


class LanguageModelHero:
    """A LoRA adapter on ``llm.base_model`` as the hero (``train.agent: llm``), delegating to
    :class:`~leaguezero.diplomacy.llm.league.LLMLeagueHero`. ``base_model`` is the base LM
    itself (no file); checkpoints are adapter folders."""

    agent = "llm"
    checkpoint_suffix = ""
    base_model_path = None

    def __init__(self, cfg: DiplomacyConfig, run_dir: Path, task_map: TaskMap = local_map) -> None:
        from leaguezero.diplomacy.llm.client import LLMError
        from leaguezero.diplomacy.llm.league import LLMLeagueHero

        if task_map is not local_map and cfg.llm.backend != "openai":
            raise TrainError(
                "train.agent=llm on Ray needs llm.backend=openai: the workers sample from one "
                "server (vLLM or leaguezero llm serve) that every node can reach"
            )
        self.cfg = cfg
        self.task_map = task_map
        try:
            self.llm: LLMLeagueHero = LLMLeagueHero(cfg, hero_name=HERO, run_dir=run_dir)
        except LLMError as err:
            raise TrainError(str(err)) from None
        self.policy = self.llm.hero

    def reference(self) -> GRPOPolicy | None:
        # The KL anchor is the base model itself (the adapter switched off).
        return self.llm.hero.reference() if self.cfg.train.kl_coef > 0 else None

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> dict[str, str]:
        # Distinct adapters at the table must fit llm.max_loras.
        from leaguezero.diplomacy.llm.adapters import fit_seating
        from leaguezero.diplomacy.llm.league import uses_adapter

        seats = fit_seating(
            HERO,
            names,
            max_loras=self.cfg.llm.max_loras,
            uses_slot=lambda n: n == HERO or uses_adapter(n),
            rng=rng,
            hero_seat=POWERS.index(hero_power),
        )
        return dict(zip(POWERS, seats, strict=True))

    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: dict[str, str],
        hero_power: str,
    ) -> list[PlayedGame]:
        from leaguezero.diplomacy.llm.agent import SeatStats
        from leaguezero.diplomacy.llm.league import uses_adapter

        agents = registry.load().agents
        adapter_paths: dict[str, Path] = {}
        for name in set(seating.values()):
            if name == HERO or not uses_adapter(name):
                continue
            agent = agents.get(name)
            if agent is None or agent.path is None:
                raise UnknownAgentError(f"league agent {name!r} has no adapter folder")
            adapter_paths[name] = registry.resolve(agent.path)
        tcfg = self.cfg.train
        seeds = [game_seed(tcfg.seed, group_idx, i) for i in range(tcfg.group_size)]
        if self.task_map is local_map:
            # The group's games run at once; every LLM seat of every game meets in batches.
            played = self.llm.play_group(
                cfg, group_idx, seating, hero_power, adapter_paths,
                seeds=seeds, temperature=tcfg.temperature,
            )  # fmt: skip
        else:  # Ray: each game a task whose seats sample on the shared server
            from leaguezero.diplomacy.llm.league import play_remote_game

            seating = self.llm.prepare(seating, hero_power, adapter_paths)
            shared = self.llm.remote_games(self.cfg.llm, tcfg.temperature)
            jobs = [
                (cfg.model_dump_json(), group_idx, i, seating, hero_power, seed)
                for i, seed in enumerate(seeds)
            ]
            played = self.task_map(play_remote_game, shared, jobs)
        return [
            PlayedGame(
                dict(g.result.scores),
                g.result.seed,
                g.records,
                g.result.phase_start,
                seating=g.seating,
                rewards={p: self.llm.seat_reward(g, p) for p in POWERS},
                stats=g.stats.get(hero_power, SeatStats()),
            )
            for g in played
        ]

    def weights(self) -> dict[str, torch.Tensor]:
        return self.llm.weights()

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.llm.load_weights(weights)

    def save(self, path: Path) -> Path:
        return self.policy.save(path)

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]:
        """The hero's order hygiene over the step's games: completions, invalid, missing and
        truncated (cut at ``llm.max_new_tokens``) counts, mean completion length in tokens."""
        stats = [g.stats for g in games if g.stats is not None]
        completions = sum(s.completions for s in stats)
        return {
            "llm_completions": completions,
            "llm_parsed": sum(s.parsed for s in stats),
            "llm_invalid": sum(s.invalid for s in stats),
            "llm_missing": sum(s.missing for s in stats),
            "llm_truncated": sum(s.truncated for s in stats),
            "llm_mean_tokens": round(sum(s.tokens for s in stats) / max(1, completions), 2),
        }

    def close(self) -> None:
        self.llm.close()


def make_hero(cfg: DiplomacyConfig, ckpt_dir: Path, task_map: TaskMap = local_map) -> Hero:
    """The hero ``cfg.train.agent`` names. An LLM hero takes a task map other than
    :func:`local_map` only with ``llm.backend: openai`` (raises :class:`TrainError`)."""
    if cfg.train.agent == "llm":
        return LanguageModelHero(cfg, ckpt_dir.parent, task_map)
    return NetworkHero(cfg, ckpt_dir, task_map)
