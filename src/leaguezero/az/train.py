"""Training a candidate from replay: policy cross-entropy, value MSE, margin MSE
(docs/reference/design.md#network-and-training).

The candidate starts from the best network's weights with a **fresh optimizer** every time
(reusing Adam moments across the candidate := best boundary was a real bug; docs/reference/design.md
#network-and-training). Training
is a pure function of (initial weights, data, seed): a test runs it twice and gets identical
weights, which fails if any optimizer state leaks between calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from leaguezero.az.replay import Batch


class TrainError(RuntimeError):
    """Training cannot go on (a non-finite loss or batch); the message says what to do."""


@dataclass(frozen=True)
class TrainSettings:
    steps: int
    batch_size: int
    lr: float
    weight_decay: float = 1e-4
    value_lambda: float = 1.0
    aux_margin_lambda: float = 0.25
    q_weight: float = 0.0  # value targets: (1 - q_weight) * outcome + q_weight * root value
    seed: int = 0
    device: str = "cpu"


@dataclass
class TrainReport:
    steps: int
    samples: int  # distinct samples in the window
    loss_policy: float  # means over the last quarter of the steps
    loss_value: float
    loss_margin: float
    loss_total: float
    first_loss_total: float  # mean over the first quarter (to see that it went down)
    samples_per_s: float


def losses(
    model: nn.Module,
    features: torch.Tensor,  # [B, F] float32
    legal: torch.Tensor,  # [B, A] bool
    pi: torch.Tensor,  # [B, A] float32
    z: torch.Tensor,  # [B] float32
    z_margin: torch.Tensor,  # [B] float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(policy CE against pi, value MSE against z, margin MSE against z_margin or 0)."""
    logits, value, margin = model(features)
    # Illegal logits get a large negative number rather than -inf: 0 * -inf would be NaN.
    log_p = F.log_softmax(logits.masked_fill(~legal, -1e9), dim=-1)
    policy = -(pi * log_p).sum(dim=-1).mean()
    value_loss = F.mse_loss(value, z)
    margin_loss = F.mse_loss(margin, z_margin) if margin is not None else value_loss * 0.0
    return policy, value_loss, margin_loss


def train_candidate(
    model: nn.Module,
    data: Batch,
    settings: TrainSettings,
    progress: Callable[[int, float], None] | None = None,
) -> TrainReport:
    """Train ``model`` (already holding the best weights) in place on ``data``.

    A new AdamW optimizer is created here on every call. ``progress(step, loss)`` is called
    after each step. Minibatches are drawn uniformly with replacement from the window.

    Raises:
        TrainError: the data holds NaN/inf, or a loss stops being finite (the model is then
            left as it was after the last finite step; do not save it).
    """
    if len(data) == 0:
        raise ValueError("no replay samples to train on")
    for key in Batch.__dataclass_fields__:
        values = getattr(data, key)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise TrainError(
                f"the replay window's {key!r} holds NaN or infinite values; it came from a "
                "damaged shard (read_shard names it) — delete that shard and train again"
            )
    device = torch.device(settings.device)
    model.to(device).train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
    )
    gen = torch.Generator().manual_seed(settings.seed)
    features = torch.from_numpy(np.ascontiguousarray(data.features))
    legal = torch.from_numpy(np.ascontiguousarray(data.legal)).bool()
    pi = torch.from_numpy(np.ascontiguousarray(data.pi))
    # Bootstrapped value targets: blend each head's outcome target with the root search value q
    # (the utility the search backs up). The search mixes the heads linearly, so its value then
    # regresses to (1 - a) * u(outcome) + a * q: far less variance than the outcome alone.
    a = float(settings.q_weight)
    q = torch.from_numpy(np.ascontiguousarray(data.q))
    z = (1.0 - a) * torch.from_numpy(np.ascontiguousarray(data.z)) + a * q
    z_margin = (1.0 - a) * torch.from_numpy(np.ascontiguousarray(data.z_margin)) + a * q
    history = np.zeros((settings.steps, 4), dtype=np.float64)
    t0 = time.perf_counter()
    for step in range(settings.steps):
        idx = torch.randint(0, len(data), (settings.batch_size,), generator=gen)
        p_loss, v_loss, m_loss = losses(
            model,
            features[idx].to(device),
            legal[idx].to(device),
            pi[idx].to(device),
            z[idx].to(device),
            z_margin[idx].to(device),
        )
        total = p_loss + settings.value_lambda * v_loss + settings.aux_margin_lambda * m_loss
        if not bool(torch.isfinite(total)):
            raise TrainError(
                f"training loss is not finite at step {step + 1} (policy {p_loss.item():.3g}, "
                f"value {v_loss.item():.3g}, margin {m_loss.item():.3g}); no candidate is "
                "written — lower train.lr or check the replay shards"
            )
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        optimizer.step()
        history[step] = (p_loss.item(), v_loss.item(), m_loss.item(), total.item())
        if progress is not None:
            progress(step + 1, history[step, 3])
    elapsed = time.perf_counter() - t0
    model.eval()
    q = max(1, settings.steps // 4)
    last, first = history[-q:].mean(axis=0), history[:q].mean(axis=0)
    return TrainReport(
        steps=settings.steps,
        samples=len(data),
        loss_policy=float(last[0]),
        loss_value=float(last[1]),
        loss_margin=float(last[2]),
        loss_total=float(last[3]),
        first_loss_total=float(first[3]),
        samples_per_s=settings.steps * settings.batch_size / max(elapsed, 1e-9),
    )
