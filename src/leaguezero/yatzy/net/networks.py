"""The Yatzy networks: YatzyNet (a residual MLP, docs/reference/design.md#network-and-training) and
BoardTowerNet (turn starts).

The forward contract (shared with ``az.inference``): ``forward(x)`` with ``x`` float32 [N, F]
returns ``(logits [N, A], value [N], margin [N] | None)``; value and margin are ``tanh``-squashed
into [-1, 1] from the point of view of the player to move.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leaguezero.yatzy.game.features import NUM_FEATURES
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.game.turn_features import ME_BOARD_COLS, OPP_BOARD_COLS, SHARED_COLS

MODEL_KIND = "yatzy_net_v1"  # stored in checkpoints; bump when the layer layout changes
TOWER_KIND = "yatzy_board_towers_v1"


class ResidualBlock(nn.Module):
    """``h + W2 relu(W1 h)`` followed by ReLU: two linear layers of width ``hidden``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [N, H] -> [N, H]
        return torch.relu(h + self.fc2(torch.relu(self.fc1(h))))


class _Heads(nn.Module):
    """Policy, value and optional margin heads over a trunk's ``[N, hidden]`` output (shared by
    both networks; the attribute names are the checkpoints' parameter names)."""

    def _build_heads(self, hidden: int, num_actions: int, margin_head: bool) -> None:
        self.has_margin_head = margin_head
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)
        self.margin = nn.Linear(hidden, 1) if margin_head else None

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        logits = self.policy(h)  # [N, A]
        value = torch.tanh(self.value(h)).squeeze(-1)  # [N]
        margin = torch.tanh(self.margin(h)).squeeze(-1) if self.margin is not None else None
        return logits, value, margin


class YatzyNet(_Heads):
    """Trunk ``F -> hidden`` plus ``blocks`` residual blocks, then three small heads.

    Args:
        num_features: input width F (94 for feature schema 1).
        num_actions: policy width A (47).
        hidden: trunk width.
        blocks: residual blocks (0 gives a one-layer MLP trunk).
        margin_head: build the auxiliary score-margin head.
    """

    kind = MODEL_KIND  # the checkpoint's model kind

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
        self.stem = nn.Linear(num_features, hidden)
        self.trunk = nn.Sequential(*[ResidualBlock(hidden) for _ in range(blocks)])
        self._build_heads(hidden, num_actions, margin_head)

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
        return self._heads(self.trunk(torch.relu(self.stem(x))))  # trunk: [N, H]


# Feature schema 2 (turn starts, ``turn_features``): each board's slice and the shared rest.
_ME_BOARD = list(ME_BOARD_COLS)  # open boxes, upper one-hot, bonus reachable
_OPP_BOARD = list(OPP_BOARD_COLS)
_SHARED = list(SHARED_COLS)  # scores, differences, filled, seat, 1


class BoardTowerNet(_Heads):
    """A turn-start value network with one tower shared by both boards (feature schema 2).

    The value of a turn start is mostly "what my board will still score" against "what the
    opponent's will", plus the score difference; both boards obey the same rules, so one tower
    (``board -> embed``, two layers of width ``hidden``) reads each, and a head (two layers of
    width ``hidden``) combines the two embeddings with the scores, differences and seat. Against
    the residual MLP of the same cost, trained on the same 123k turn-start samples for 3,000
    steps, its turn search scored 226.7 vs 213.5 solitaire points (docs/reference/turn_search.md).
    The policy head exists for the forward contract and is not trained.
    """

    kind = TOWER_KIND

    def __init__(
        self,
        num_features: int = 169,
        num_actions: int = NUM_ACTIONS,
        hidden: int = 256,
        embed: int = 128,
        margin_head: bool = True,
    ) -> None:
        super().__init__()
        if num_features != 169:
            raise ValueError("BoardTowerNet reads feature schema 2 (169 features)")
        self.num_features = num_features
        self.num_actions = num_actions
        self.hidden = hidden
        self.embed = embed
        for name, index in (("me", _ME_BOARD), ("opp", _OPP_BOARD), ("shared", _SHARED)):
            self.register_buffer(f"_{name}", torch.tensor(index), persistent=False)
        self.tower = nn.Sequential(
            nn.Linear(len(_ME_BOARD), hidden), nn.ReLU(), nn.Linear(hidden, embed), nn.ReLU()
        )
        self.head = nn.Sequential(
            nn.Linear(2 * embed + len(_SHARED), hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )  # fmt: skip
        self._build_heads(hidden, num_actions, margin_head)

    def kwargs(self) -> dict[str, Any]:
        return {
            "num_features": self.num_features,
            "num_actions": self.num_actions,
            "hidden": self.hidden,
            "embed": self.embed,
            "margin_head": self.has_margin_head,
        }

    def value_forward(self, dtype: torch.dtype = torch.float32):
        """The turn search's value-only forward over numpy features (each distinct board's tower
        once, no policy head; :mod:`leaguezero.yatzy.net.tower_values`), in ``dtype``."""
        from leaguezero.yatzy.net.tower_values import TowerValues

        return TowerValues(self, dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        me = self.tower(x[:, self._me])  # [N, E]
        opp = self.tower(x[:, self._opp])  # [N, E]
        return self._heads(self.head(torch.cat([me, opp, x[:, self._shared]], dim=1)))


# The name -> constructor map handed to ``az.checkpoint.load_checkpoint`` (az knows no game).
MODEL_CONSTRUCTORS = {MODEL_KIND: YatzyNet, TOWER_KIND: BoardTowerNet}


def build_net(
    hidden: int = 256,
    blocks: int = 2,
    margin_head: bool = True,
    seed: int = 0,
    num_features: int = NUM_FEATURES,
    arch: str = "resmlp",
):
    """A freshly initialised network (seeded, so it is reproducible).

    ``num_features`` is 94 for feature schema 1 (PUCT) and 169 for schema 2 (the turn search's
    turn starts; its policy head is not trained). ``arch``: ``resmlp`` (YatzyNet, any schema)
    or ``board_towers`` (BoardTowerNet, schema 2 only; ``blocks`` unused).
    """
    make = _ARCHS.get(arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if make is None:
            raise ValueError(f"unknown network arch {arch!r}: use {' or '.join(_ARCHS)}")
        return make(num_features, hidden, blocks, margin_head)


# model.arch -> constructor (num_features, hidden, blocks, margin_head): one table, no switch.
_ARCHS = {
    "resmlp": lambda features, hidden, blocks, margin: YatzyNet(
        num_features=features, hidden=hidden, blocks=blocks, margin_head=margin
    ),
    "board_towers": lambda features, hidden, _blocks, margin: BoardTowerNet(
        num_features=features, hidden=hidden, embed=max(8, hidden // 2), margin_head=margin
    ),
}
