"""Which eval requests the inference server serves: the checks a request passes on the event
loop before it is queued. Each returns ``(status, message)`` for the error reply, or None.

Shapes and finite features (kind 1), the position layout and ranges (kind 4: the game's codec
checks every value, so its encoder never sees one out of range; a request for logits needs a
legal action at every row), and the forward-pass budget
(rows times the model's bytes per row, ``ServerSettings.max_forward_bytes``).
"""

from __future__ import annotations

import numpy as np

from leaguezero.az.inference.positions import PositionCodec
from leaguezero.az.inference.protocol import EvalRequest, PositionRequest, Status

Refusal = tuple[Status, str] | None


def refuse_features(request: EvalRequest, num_features: int, num_actions: int) -> Refusal:
    """Why a feature request cannot be served by a model of F = ``num_features`` and
    A = ``num_actions`` (shape, non-finite values), or None."""
    n_feat, n_act = request.features.shape[1], request.legal.shape[1]
    values_only = n_act == 0  # A = 0: values only (the turn search needs no priors)
    if n_feat != num_features or (n_act != num_actions and not values_only):
        msg = (
            f"request has F={n_feat}, A={n_act}; model {request.model_id} needs "
            f"F={num_features}, A={num_actions}"
        )
        return Status.SHAPE_MISMATCH, msg
    if not np.isfinite(request.features).all():
        bad = int(np.flatnonzero(~np.isfinite(request.features).all(axis=1))[0])
        msg = f"features hold NaN or infinite values (first in row {bad}); nothing evaluated"
        return Status.NON_FINITE, msg
    return None


def refuse_positions(
    request: PositionRequest, codec: PositionCodec | None, num_actions: int
) -> Refusal:
    """Why a position request cannot be served by a model with ``codec`` (None: it takes no
    positions) and ``num_actions`` policy outputs: layout, width, actions, values out of range;
    or None."""
    if codec is None or request.position_schema_id != codec.position_schema_id:
        served_id = "none" if codec is None else codec.position_schema_id
        msg = (
            f"position_schema_id {request.position_schema_id} does not match model "
            f"{request.model_id} (position schema {served_id})"
        )
        return Status.SCHEMA_MISMATCH, msg
    if request.positions.shape[1] != codec.width:
        width = request.positions.shape[1]
        msg = f"position rows have W={width}; model {request.model_id} needs W={codec.width}"
        return Status.SHAPE_MISMATCH, msg
    wanted = request.num_actions  # 0: values only
    if wanted and (wanted != num_actions or codec.legal is None):
        served = num_actions if codec.legal is not None else "0 (values only from positions)"
        msg = f"position request has A={wanted}; model {request.model_id} serves A={served}"
        return Status.SHAPE_MISMATCH, msg
    bad = codec.check(request.positions)
    if bad >= 0:
        return Status.MALFORMED, f"position row {bad} holds values outside the game's ranges"
    if wanted:
        # A row where nothing is legal would get every logit -inf (NaN after a plain softmax):
        # there is no policy to give, so the request is refused rather than answered.
        assert codec.legal is not None  # checked above
        stuck = ~codec.legal(request.positions).any(axis=1)
        if stuck.any():
            row = int(np.flatnonzero(stuck)[0])
            msg = (
                f"position row {row} has no legal action (a finished game?): there is no policy "
                "to give; ask its value only (A=0) or leave it out. Nothing evaluated"
            )
            return Status.MALFORMED, msg
    return None


def refuse_budget(rows: int, bytes_per_row: int, limit: int) -> Refusal:
    """OVER_BUDGET when the forward pass of ``rows`` rows (``bytes_per_row`` each) would take
    more than ``limit`` bytes; the message says how many rows fit."""
    if rows * bytes_per_row <= limit:
        return None
    msg = (
        f"a request of {rows} rows would take {rows * bytes_per_row / 2**20:.0f} MiB in the "
        f"forward pass; this server allows {limit / 2**20:.0f} MiB (infer.max_forward_mb): "
        f"send at most {limit // bytes_per_row} rows per request"
    )
    return Status.OVER_BUDGET, msg
