"""The value head's auxiliary loss, in imitation and in GRPO
(:mod:`leaguezero.diplomacy.agents.value`).

Imitation (:func:`value_loss`, :func:`value_calibration`): the corpus boards carry the teacher
seat's realised final score share (``PhaseBoard.share``); a minibatch's distinct boards are its
value samples. GRPO (:class:`ValueGRPOTrainer`): the learning seats' boards of each game,
each with that seat's final score share in that game (:func:`game_value_samples`).

Why a subclass with an optimizer pre-step hook: the value MSE must join the policy loss's
gradient in the *same* Adam step (so ``train.value_coef`` weighs it against the policy loss;
a separate Adam step would normalise the coefficient away). :class:`GRPOTrainer` zeroes,
accumulates, clips and steps inside :meth:`~.grpo.GRPOTrainer.step`; the hook adds the value
gradient (clipped on its own to ``max_grad_norm``) just before each of its optimizer steps.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from leaguezero.diplomacy.agents.actor import PhaseBoard
from leaguezero.diplomacy.agents.policy import DiplomacyPolicy
from leaguezero.diplomacy.agents.value import calibration, score_shares
from leaguezero.diplomacy.game.records import ActionRecord, PlayedGame
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings


def _boards(records: Sequence[ActionRecord]) -> list[PhaseBoard]:
    """The distinct boards of ``records`` whose share is known, in first-seen order."""
    seen: dict[int, PhaseBoard] = {}
    for record in records:
        board = record.payload.board
        if board.share is not None:
            seen.setdefault(id(board), board)
    return list(seen.values())


def value_loss(policy: DiplomacyPolicy, records: Sequence[ActionRecord]) -> torch.Tensor:
    """MSE of the predicted shares of ``records``' distinct boards (0 when none is known)."""
    boards = _boards(records)
    if not boards:
        return torch.zeros(())
    target = torch.tensor([b.share for b in boards], dtype=torch.float32)
    return torch.mean((policy.values(boards) - target) ** 2)


def value_calibration(
    policy: DiplomacyPolicy, records: Sequence[ActionRecord], bins: int = 5
) -> dict[str, Any]:
    """:func:`~leaguezero.diplomacy.agents.value.calibration` of the value head on ``records``'
    distinct boards: MSE against the constant baseline and predicted vs realised by bins."""
    boards = _boards(records)
    with torch.no_grad():
        predicted = policy.values(boards).tolist() if boards else []
    return calibration(predicted, [b.share for b in boards], bins)


def game_value_samples(
    groups: Sequence[Sequence[PlayedGame]], max_boards: int, seed: int
) -> tuple[list[PhaseBoard], torch.Tensor]:
    """The learning seats' distinct boards of ``groups`` and ``[N]`` float32 final score
    shares of the seat in its game; at most ``max_boards``, a seeded uniform draw."""
    samples: dict[tuple[int, str], tuple[PhaseBoard, float]] = {}
    for group in groups:
        for game in group:
            share = score_shares(game.scores)[game.seat]
            for record in game.seat_records:
                board = record.payload.board
                samples.setdefault((id(board), game.seat), (board, share))
    chosen = list(samples.values())
    if len(chosen) > max_boards:
        chosen = random.Random(seed).sample(chosen, max_boards)
    return [b for b, _ in chosen], torch.tensor([s for _, s in chosen], dtype=torch.float32)


class ValueGRPOTrainer(GRPOTrainer):
    """:class:`~.grpo.GRPOTrainer` plus ``settings.value_coef`` times the value head's MSE on the
    step's games (module doc). Logs ``value_mse`` (before the step's update), ``value_baseline_mse``
    (the step's targets' variance: a constant's MSE) and ``value_boards``."""

    def __init__(
        self,
        policy: DiplomacyPolicy,
        settings: GRPOSettings = GRPOSettings(),
        *,
        reference: DiplomacyPolicy | None = None,
        max_boards: int = 512,
    ) -> None:
        if policy.net.value_head is None:
            raise ValueError("ValueGRPOTrainer needs a policy with a value head")
        super().__init__(policy, settings, reference=reference)
        self.value_policy = policy
        self.value_coef = settings.value_coef
        self.max_boards = max_boards
        self._value_batch: tuple[list[PhaseBoard], torch.Tensor] | None = None
        self.optimizer.register_step_pre_hook(self._add_value_gradient)

    def step(
        self,
        groups: Sequence[Sequence[PlayedGame]],
        *,
        seed: int = 0,
        global_step: int | None = None,
    ) -> dict[str, float]:
        boards, target = game_value_samples(groups, self.max_boards, seed)
        metrics: dict[str, float] = {"value_boards": float(len(boards))}
        if boards:
            with torch.no_grad():
                predicted = self.value_policy.values(boards)
            metrics["value_mse"] = float(torch.mean((predicted - target) ** 2))
            metrics["value_baseline_mse"] = float(torch.var(target, unbiased=False))
            self._value_batch = (boards, target)
        try:
            return {**super().step(groups, seed=seed, global_step=global_step), **metrics}
        finally:
            self._value_batch = None

    def _add_value_gradient(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        if self._value_batch is None or self.value_coef == 0:
            return
        boards, target = self._value_batch
        loss = self.value_coef * torch.mean((self.value_policy.values(boards) - target) ** 2)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads if g is not None))
        scale = min(1.0, self.settings.max_grad_norm / (float(norm) + 1e-12))
        for param, grad in zip(self.params, grads, strict=True):
            if grad is not None:
                grad = grad * scale
                param.grad = grad if param.grad is None else param.grad + grad


def grpo_trainer(policy: Any, settings: GRPOSettings, *, reference: Any = None) -> GRPOTrainer:
    """The hero's trainer: :class:`ValueGRPOTrainer` for a policy network with a value head
    (``settings.value_coef`` weighs its MSE), else the plain :class:`~.grpo.GRPOTrainer`."""
    if isinstance(policy, DiplomacyPolicy) and policy.net.value_head is not None:
        return ValueGRPOTrainer(policy, settings, reference=reference)
    return GRPOTrainer(policy, settings, reference=reference)
