"""Positions a server encodes itself (protocol kind 4).

A game plugs a :class:`PositionCodec` into a served model: the layout of its compact position
rows (``position_schema_id``, ``width`` int32 columns), a check of their ranges (a hostile
client must not make the encoder write out of bounds), the encoder into the model's features
and, for a model with a policy, the legal actions of each row (a request that asks for logits
gets them masked, as a features request's are by the legal bits it sends). ``az`` knows no
game; Yatzy passes its codec where it builds a served model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PositionCodec:
    """How a served model reads compact positions.

    Attributes:
        position_schema_id: the layout's id, sent in every position request.
        width: int32 columns a row has (W).
        check: ``check(positions int32 [N, W])`` -> index of the first row outside the game's
            ranges, or -1 when all are valid.
        encode: ``encode(positions int32 [N, W])`` -> float32 [N, F] features of the model's
            feature schema (may return a view of a buffer it reuses: one forward at a time).
        legal: ``legal(positions int32 [N, W])`` -> bool [N, A], the actions the policy ranges
            over at each row (a new array); None: the model serves values only from positions.
    """

    position_schema_id: int
    width: int
    check: Callable[[np.ndarray], int]
    encode: Callable[[np.ndarray], np.ndarray]
    legal: Callable[[np.ndarray], np.ndarray] | None = None
