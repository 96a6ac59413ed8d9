"""YatzyNet: a residual MLP with policy, value and optional margin heads (PRD §11.1).

The forward contract (shared with ``az.inference``): ``forward(x)`` with ``x`` float32 [N, F]
returns ``(logits [N, A], value [N], margin [N] | None)``; value and margin are ``tanh``-squashed
into [-1, 1] from the point of view of the player to move.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leaguezero.yatzy.features import NUM_FEATURES
from leaguezero.yatzy.tables import NUM_ACTIONS

MODEL_KIND = "yatzy_net_v1"  # stored in checkpoints; bump when the layer layout changes


class ResidualBlock(nn.Module):
    """``h + W2 relu(W1 h)`` followed by ReLU: two linear layers of width ``hidden``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [N, H] -> [N, H]
        return torch.relu(h + self.fc2(torch.relu(self.fc1(h))))


class YatzyNet(nn.Module):
    """Trunk ``F -> hidden`` plus ``blocks`` residual blocks, then three small heads.

    Args:
        num_features: input width F (94 for feature schema 1).
        num_actions: policy width A (47).
        hidden: trunk width.
        blocks: residual blocks (0 gives a one-layer MLP trunk).
        margin_head: build the auxiliary score-margin head.
    """

    def __init__(
        self,
        num_features: int = NUM_FEATURES,
        num_actions: int = NUM_ACTIONS,
        hidden: int = 256,
        blocks: int = 2,
        margin_head: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.num_actions = num_actions
        self.hidden = hidden
        self.blocks = blocks
        self.has_margin_head = margin_head
        self.stem = nn.Linear(num_features, hidden)
        self.trunk = nn.Sequential(*[ResidualBlock(hidden) for _ in range(blocks)])
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)
        self.margin = nn.Linear(hidden, 1) if margin_head else None

    def kwargs(self) -> dict[str, Any]:
        """The constructor arguments, stored in checkpoints so the net can be rebuilt."""
        return {
            "num_features": self.num_features,
            "num_actions": self.num_actions,
            "hidden": self.hidden,
            "blocks": self.blocks,
            "margin_head": self.has_margin_head,
        }

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        h = self.trunk(torch.relu(self.stem(x)))  # [N, H]
        logits = self.policy(h)  # [N, A]
        value = torch.tanh(self.value(h)).squeeze(-1)  # [N]
        margin = torch.tanh(self.margin(h)).squeeze(-1) if self.margin is not None else None
        return logits, value, margin


# The name -> constructor map handed to ``az.checkpoint.load_checkpoint`` (az knows no game).
MODEL_CONSTRUCTORS = {MODEL_KIND: YatzyNet}


def build_net(
    hidden: int = 256,
    blocks: int = 2,
    margin_head: bool = True,
    seed: int = 0,
    num_features: int = NUM_FEATURES,
):
    """A freshly initialised YatzyNet (seeded, so it is reproducible).

    ``num_features`` is 94 for feature schema 1 (PUCT) and 169 for schema 2 (the turn search's
    turn starts; its policy head is not trained).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return YatzyNet(
            num_features=num_features, hidden=hidden, blocks=blocks, margin_head=margin_head
        )
