"""The league hero's interface (:class:`Hero`), the game record it plays, and task maps.

:class:`~leaguezero.diplomacy.train.loop.LeagueTrainer` runs the same loop for both heroes; a
hero owns what differs: its GRPO policy and the reference of the KL term, how the table is
seated, how a group's games are played, its weights in ``state.pt`` and its checkpoint files.

- :class:`~.network_hero.NetworkHero` (``train.agent: policy``): the small CPU policy network;
- :class:`~.llm_hero.LanguageModelHero` (``train.agent: llm``): a LoRA adapter on
  ``llm.base_model``.

Both return each game as one :class:`PlayedGame`, the record that goes from the rollout to the
loss (the loop hands the trainer each learning seat's view of it). A :class:`TaskMap` says where
a group's games run (:data:`local_map`: in this process; ``RayTaskMap``: Ray tasks) and whether
that is this process (``in_process``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train.grpo import GRPOPolicy
from leaguezero.league.registry import LeagueRegistry

if TYPE_CHECKING:
    import random


class TaskMap(Protocol):
    """``task_map(fn, shared, jobs) -> [fn(shared, *job) for job in jobs]``, in order."""

    in_process: bool  # the jobs run in this process (they may share its objects)

    def __call__(
        self, fn: Callable[..., Any], shared: Any, jobs: Sequence[tuple[Any, ...]]
    ) -> list[Any]: ...


class TrainError(RuntimeError):
    """A run directory or config that cannot be trained or resumed (the message says what
    to do)."""


class LocalTaskMap:
    """The in-process task map: each job in turn."""

    in_process = True

    def __call__(
        self, fn: Callable[..., Any], shared: Any, jobs: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        return [fn(shared, *job) for job in jobs]


local_map = LocalTaskMap()


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
    # seats' rewards (llm.format_penalty) and count the hero power's order hygiene
    # (its SeatStats); None: as given / the scores / none.
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

    agent: str  # train.agent, "policy" | "llm" (stored in state.pt; a resume must match)
    policy: GRPOPolicy  # the weights GRPO updates
    checkpoint_suffix: str  # ".pt" for a file, "" for an adapter folder
    base_model_path: str | None  # league path of base_model (None: no file)
    records_per_pass: int | None  # train.records_per_pass when 0 (None: a step's records)

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
