"""The league hero's interface (:class:`Hero`), the game record it plays, and task maps.

:class:`~leaguezero.diplomacy.train.loop.LeagueTrainer` runs the same loop for both heroes; a
hero owns what differs: its GRPO policy and the reference of the KL term, how the table is
seated, how a group's games are played, its weights in ``state.pt`` and its checkpoint files
(with their lineage, :mod:`.lineage`), and how it starts from a saved agent (``--init-from``).

- :class:`~.network_hero.NetworkHero` (``train.agent: policy``): the small CPU policy network;
- :class:`~.llm_hero.LanguageModelHero` (``train.agent: llm``): a LoRA adapter on
  ``llm.base_model``.

Both return each game as one :class:`~leaguezero.diplomacy.game.records.PlayedGame`, the record
that goes from the rollout to the loss (the loop hands it to the trainer once per learning seat,
with that seat set). A :class:`TaskMap` says where
a group's games run (:data:`local_map`: in this process; ``RayTaskMap``: Ray tasks) and whether
that is this process (``in_process``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import Seating
from leaguezero.diplomacy.game.records import PlayedGame
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


class Hero(Protocol):
    """What the league loop needs from a hero (see the module doc)."""

    agent: str  # train.agent, "policy" | "llm" (stored in state.pt; a resume must match)
    policy: GRPOPolicy  # the weights GRPO updates
    checkpoint_suffix: str  # ".pt" for a file, "" for an adapter folder
    base_model_path: str | None  # league path of base_model (None: no file)
    records_per_pass: int | None  # train.records_per_pass when 0 (None: a step's records)
    memory_plan: str | None  # how records_per_pass was sized (an LLM hero), for the log
    trim_above_gb: float | None  # RSS over which a backward pass trims (GRPOSettings)

    def start_from(self, path: Path) -> None: ...  # --init-from: first weights, KL reference

    def reference(self) -> GRPOPolicy | None: ...

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> Seating: ...

    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: Seating,
        hero_power: str,
    ) -> list[PlayedGame]: ...

    def weights(self) -> dict[str, torch.Tensor]: ...

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None: ...

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> Path: ...

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]: ...

    def close(self) -> None: ...
