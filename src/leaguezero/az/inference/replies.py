"""Reply frames of the inference server: a batch's forward pass encoded per request, and the
text replies of control operations. Runs on the server's executor thread (numpy/torch only)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from leaguezero.az.inference.local import forward_numpy
from leaguezero.az.inference.protocol import EvalRequest, encode_reply


def text_reply(request_id: int, text: str) -> bytes:
    empty = np.zeros((0, 0), np.float32)
    return encode_reply(request_id, empty, np.zeros(0, np.float32), None, text)


def forward_and_encode(
    model: nn.Module, requests: list[EvalRequest], device: torch.device
) -> list[bytes | None]:
    """One forward pass over all ``requests`` (rows concatenated); one reply frame per request
    (None for a request whose outputs are not finite)."""
    if len(requests) == 1:
        # Frames are read-only bytes; torch wants writable memory, and the copy is ~10 us.
        features, legal = requests[0].features.copy(), requests[0].legal
    else:
        features = np.concatenate([r.features for r in requests])  # [rows, F]
        legal = np.concatenate([r.legal for r in requests])  # [rows, A]
    out = forward_numpy(model, features, device, legal)
    frames, offset = [], 0
    for r in requests:
        end = offset + r.rows
        margins = None if out.margins is None else out.margins[offset:end]
        logits, values = out.logits[offset:end], out.values[offset:end]
        finite = np.isfinite(values).all() and np.all(np.isfinite(logits) | (logits == -np.inf))
        if margins is not None:
            finite = finite and np.isfinite(margins).all()
        frames.append(encode_reply(r.request_id, logits, values, margins) if finite else None)
        offset = end
    return frames
