"""The small CPU policy network as the league hero (``train.agent: policy``).

A group's games are independent jobs of :func:`play_policy_game`, a pure function of plain data
(the hero's weights, opponents' checkpoint paths, seeds), mapped by the injected task map: in
this process (:data:`~.heroes.local_map`) or as Ray tasks
(``leaguezero.distributed.tasks.RayTaskMap``, chosen by the command line) — the same seeds give
the same games either way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from leaguezero.diplomacy.agents.policy import (
    CheckpointError,
    DiplomacyPolicy,
    PolicyConfig,
    load_policy,
)
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import (
    AgentKind,
    AgentSpec,
    Seating,
    parse_agents,
    parse_seating,
)
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.records import PlayedGame
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.game.seats import UnknownAgentError
from leaguezero.diplomacy.train.heroes import TaskMap, TrainError, game_seed, local_map
from leaguezero.league.matchmaker import cluster_seating
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.session import BASE_MODEL, HERO


@dataclass(frozen=True)
class PolicyGames:
    """What every game of a group shares (shipped once per group to a remote worker)."""

    game_cfg_json: str
    train_seed: int
    temperature: float
    hero_config: PolicyConfig
    hero_state: dict[str, torch.Tensor]
    opponent_paths: dict[str, str]
    opponents_greedy: bool = False  # train.opponents_greedy
    llm_folders: tuple[str, ...] = ()  # the opponents (names) whose path is an LLM folder


def play_policy_game(
    shared: PolicyGames,
    group_idx: int,
    game_idx: int,
    seating: Seating,
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
    llm_seats = _llm_seats(game_cfg, seating, shared)

    def resolve(spec: AgentSpec):
        seed = game_seed(shared.train_seed, group_idx, game_idx, next(counter))
        if spec.kind is AgentKind.HERO:
            actor = hero.actor(seed=seed, temperature=shared.temperature)
            hero_actors.append(actor)
            return actor
        llm_seat = None if llm_seats is None else llm_seats(spec)
        if llm_seat is not None:
            return llm_seat
        name = spec.name
        if name not in opponents:
            if name not in shared.opponent_paths:
                raise UnknownAgentError(f"league agent {name!r} has no checkpoint path")
            opponents[name] = load_policy(shared.opponent_paths[name])
        return opponents[name].actor(
            seed=seed, temperature=shared.temperature, greedy=shared.opponents_greedy
        )

    game = run_rollout(game_cfg, group_idx, game_idx, seating, hero_power, resolver=resolve)
    records = [r for a in hero_actors for r in a.records]
    return PlayedGame(dict(game.scores), game.seed, records, game.phase_start)


def _llm_seats(cfg: DiplomacyConfig, seating: Seating, shared: PolicyGames):
    """The resolver of the seating's league agents that are LLM folders (an exploiter's LLM
    target: docs/reference/league.md), None when there are none: on this process's base model,
    loaded once per process (:func:`~leaguezero.diplomacy.llm.runtime.shared_runtime`), each game's
    LLM seats sampled in one batch seeded by the game's seed; most probable orders under
    ``train.opponents_greedy``, else sampled at ``llm.temperature``."""
    names = {spec.name for spec in seating.values()} & set(shared.llm_folders)
    if not names:
        return None
    paths = [shared.opponent_paths[n] for n in names]
    folders = dict(zip(names, parse_agents(paths), strict=True))
    from leaguezero.diplomacy.llm.resolvers import folder_resolver

    llm = folder_resolver(
        list(folders.values()), cfg.llm, seed=shared.train_seed, greedy=shared.opponents_greedy
    )
    return lambda spec: llm(folders[spec.name]) if spec.name in folders else None


def init_config(cfg: DiplomacyConfig, path: Path) -> DiplomacyConfig:
    """``cfg`` with its ``model`` section taken from the policy checkpoint ``path`` (the
    network a run starts from decides its shape). Raises :class:`TrainError` (one line) for a
    file that is not a usable policy checkpoint."""
    try:
        shape = load_policy(path).config
    except CheckpointError as err:
        raise TrainError(f"--init-from: {str(err).splitlines()[0]}") from None
    if shape.loc_embedding != PolicyConfig().loc_embedding:
        raise TrainError(
            f"--init-from {path}: location embedding {shape.loc_embedding}, a training run "
            f"builds {PolicyConfig().loc_embedding}"
        )
    update = {
        "hidden": shape.hidden,
        "layers": shape.layers,
        "decoder": shape.decoder,
        "attention": shape.attention,
    }
    model = cfg.model.model_copy(update={**update, "value_head": shape.value_head})
    return cfg.model_copy(update={"model": model})


def policy_seating(
    cfg: DiplomacyConfig, names: list[str], hero_power: str, rng: random.Random
) -> Seating:
    """The live hero at ``hero_power`` and the drawn ``names`` around it (cluster seating when
    ``max_unique_opponents`` is under six), parsed."""
    hero_seat = POWERS.index(hero_power)
    if cfg.max_unique_opponents >= len(POWERS) - 1:
        seats = [*names[:hero_seat], HERO, *names[hero_seat:]]
    else:
        seats = cluster_seating(HERO, names, len(POWERS), cfg.max_unique_opponents, rng, hero_seat)
    return parse_seating(dict(zip(POWERS, seats, strict=True)))  # the league's draw, parsed


class NetworkHero:
    """The small CPU policy network as the hero (``train.agent: policy``).

    Step 0 saves the initial network as ``checkpoints/base_model.pt`` (the ``base_model``
    baseline, and the KL reference when ``train.kl_coef > 0``): fresh weights, or the agent
    ``--init-from`` names (:meth:`start_from`).
    """

    checkpoint_suffix = ".pt"
    records_per_pass = None  # a step's records in one pass (the network is small)
    memory_plan = None
    trim_above_gb = None  # a small network: nothing to hand back

    def __init__(self, cfg: DiplomacyConfig, ckpt_dir: Path, task_map: TaskMap = local_map):
        tcfg = cfg.train
        self.agent = tcfg.hero.name
        self.cfg = cfg
        self.task_map = task_map
        model = cfg.model
        shape = PolicyConfig(
            model.hidden,
            model.layers,
            decoder=model.decoder,
            value_head=model.value_head,
            attention=model.attention,
        )
        self.policy = DiplomacyPolicy(shape, seed=cfg.run.seed)
        self.base_path = ckpt_dir / f"{BASE_MODEL}.pt"
        if not self.base_path.exists():
            self.policy.save(self.base_path)  # step 0: the base model is the initial policy
        self.base_model_path = f"{ckpt_dir.name}/{BASE_MODEL}.pt"

    def start_from(self, path: Path) -> None:
        """A new run's first weights are the checkpoint ``path``'s (its shape is the config's,
        :func:`init_config`); they become ``base_model`` and the KL reference too."""
        try:
            self.policy.load(path)
        except CheckpointError as err:
            raise TrainError(f"--init-from: {str(err).splitlines()[0]}") from None
        self.policy.save(self.base_path)

    def reference(self) -> DiplomacyPolicy:
        # The KL anchor (the loop asks only when train.kl_coef > 0): the run's first weights.
        return load_policy(self.base_path)

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> Seating:
        return policy_seating(self.cfg, names, hero_power, rng)

    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: Seating,
        hero_power: str,
    ) -> list[PlayedGame]:
        state = registry.load()
        paths = {}
        for name in {*(spec.name for spec in seating.values()), BASE_MODEL}:
            agent = state.agents.get(name)
            if agent is not None and agent.path is not None:
                paths[name] = str(registry.resolve(agent.path).resolve())
        tcfg = self.cfg.train
        specs = parse_agents(list(paths.values())) if paths else []
        llm_folders = tuple(n for n, spec in zip(paths, specs, strict=True) if spec.is_llm_folder)
        shared = PolicyGames(
            cfg.model_dump_json(),
            self.cfg.run.seed,
            tcfg.temperature,
            self.policy.config,
            {k: v.detach().cpu() for k, v in self.policy.net.state_dict().items()},
            paths,
            tcfg.opponents_greedy,
            llm_folders,
        )
        jobs = [(group_idx, g, seating, hero_power) for g in range(tcfg.group_size)]
        return self.task_map(play_policy_game, shared, jobs)

    def weights(self) -> dict[str, torch.Tensor]:
        return self.policy.net.state_dict()

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.policy.net.load_state_dict(weights)

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> Path:
        return self.policy.save(path, extra)

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]:
        return {}  # every order the network gives is legal

    def close(self) -> None:
        pass
