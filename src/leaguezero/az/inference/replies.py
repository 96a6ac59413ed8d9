"""Reply frames of the inference server: a batch's forward pass encoded per request, and the
text replies of control operations. Runs on the server's executor thread (numpy/torch only)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leaguezero.az.inference.local import ValueFunction, forward_numpy
from leaguezero.az.inference.positions import PositionCodec
from leaguezero.az.inference.protocol import EvalRequest, PositionRequest, encode_reply


def text_reply(request_id: int, text: str) -> bytes:
    empty = np.zeros((0, 0), np.float32)
    return encode_reply(request_id, empty, np.zeros(0, np.float32), None, text)


def forward_and_encode(
    model: nn.Module,
    requests: list[EvalRequest | PositionRequest],
    device: torch.device,
    value_function: ValueFunction | None = None,
    codec: PositionCodec | None = None,
) -> list[bytes | None]:
    """One forward pass over all ``requests`` (rows concatenated); one reply frame per request
    (None for a request whose outputs are not finite).

    Requests that want logits (features with legal bits, positions with A > 0: ``codec``
    encodes their rows and gives their legal actions) get logits with illegal actions ``-inf``,
    values and margins. Values-only requests (A = 0) get values and margins and no logits:
    through ``value_function`` when the model has one (the board-tower net: each board's tower
    once, no policy head), else the plain forward without its logits. A batch may mix the kinds.
    """
    frames: list[bytes | None] = [None] * len(requests)
    wants = [_wants_logits(r) for r in requests]
    full = [i for i, w in enumerate(wants) if w]
    values_only = [i for i, w in enumerate(wants) if not w]
    if full:
        batch = [requests[i] for i in full]
        features, legal = _policy_inputs(batch, codec)
        out = forward_numpy(model, features, device, legal)
        _encode(batch, full, out.logits, out.values, out.margins, frames)
    if values_only:
        batch = [requests[i] for i in values_only]
        features = _value_features(batch, codec)
        if value_function is not None:
            values, margins = value_function(features)
        else:
            out = forward_numpy(model, features, device)
            values, margins = out.values, out.margins
        empty = np.zeros((len(features), 0), np.float32)
        _encode(batch, values_only, empty, values, margins, frames)
    return frames


def _wants_logits(request: EvalRequest | PositionRequest) -> bool:
    if isinstance(request, PositionRequest):
        return request.num_actions > 0
    return request.legal.shape[1] > 0


def _policy_inputs(
    requests: list[EvalRequest | PositionRequest], codec: PositionCodec | None
) -> tuple[np.ndarray, np.ndarray]:
    """Features [N, F] and legal actions [N, A] of requests that want logits: position rows
    concatenated, encoded and masked at once when all are positions, else per request."""
    if all(isinstance(r, EvalRequest) for r in requests):
        return _rows(requests, "features"), _rows(requests, "legal")
    assert codec is not None and codec.legal is not None  # admission refuses them otherwise
    if all(isinstance(r, PositionRequest) for r in requests):
        rows = _rows(requests, "positions")
        return codec.encode(rows), codec.legal(rows)
    features, legal = [], []
    for r in requests:
        if isinstance(r, PositionRequest):
            features.append(codec.encode(r.positions).copy())
            legal.append(codec.legal(r.positions))
        else:
            features.append(r.features)
            legal.append(r.legal)
    return np.concatenate(features), np.concatenate(legal)


def _value_features(
    requests: list[EvalRequest | PositionRequest], codec: PositionCodec | None
) -> np.ndarray:
    """The float32 features [N, F] of values-only requests in order: position rows concatenated
    and encoded at once (a view of the codec's buffer) when all are positions, else per
    request."""
    if all(isinstance(r, PositionRequest) for r in requests):
        assert codec is not None  # the server refuses position requests without a codec
        if len(requests) == 1:
            return codec.encode(requests[0].positions)
        return codec.encode(np.concatenate([r.positions for r in requests]))
    parts = [
        codec.encode(r.positions).copy() if isinstance(r, PositionRequest) else r.features
        for r in requests
    ]
    return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()


def _rows(requests: list[EvalRequest | PositionRequest], field: str) -> np.ndarray:
    """One request's array (copied: frames are read-only bytes and torch wants writable memory)
    or all requests' rows concatenated."""
    if len(requests) == 1:
        return getattr(requests[0], field).copy()
    return np.concatenate([getattr(r, field) for r in requests])


def _encode(requests, slots, logits, values, margins, frames) -> None:
    """Cut the batch's outputs per request into ``frames[slots[i]]`` (None when not finite)."""
    offset = 0
    for slot, r in zip(slots, requests, strict=True):
        end = offset + r.rows
        part_margins = None if margins is None else margins[offset:end]
        part_logits, part_values = logits[offset:end], values[offset:end]
        finite = np.isfinite(part_values).all() and np.all(
            np.isfinite(part_logits) | (part_logits == -np.inf)
        )
        if part_margins is not None:
            finite = finite and np.isfinite(part_margins).all()
        if finite:
            frames[slot] = encode_reply(r.request_id, part_logits, part_values, part_margins)
        offset = end
