"""The ``model`` section of the Diplomacy config: the policy network of a policy hero."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from leaguezero.common.config import Section


class ModelSection(Section):
    """The policy network of a policy hero (docs/guides/diplomacy_training.md)."""

    hidden: int = Field(64, ge=4, description="Policy network width.")
    layers: int = Field(2, ge=0, description="Graph layers of the policy network.")
    decoder: Literal["independent", "sequential"] = Field(
        "independent",
        description="independent: each unit's order from the board; sequential: each given "
        "the power's orders decoded before it this phase (a run --init-from a checkpoint "
        "takes the checkpoint's).",
    )
    value_head: bool = Field(
        False,
        description="A head predicting the power's final score share (trained with "
        "train.value_coef; a run --init-from a checkpoint takes the checkpoint's).",
    )
    attention: int = Field(
        0,
        ge=0,
        le=64,
        description="Heads of a self-attention layer over the map's locations after the graph "
        "layers (0: none; a divisor of hidden; a run --init-from a checkpoint takes the "
        "checkpoint's).",
    )
