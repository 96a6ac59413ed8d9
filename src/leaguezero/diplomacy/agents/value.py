"""The policy network's value head: a power's expected share of the final score.

With ``PolicyConfig.value_head`` the network also predicts, from the board embedding it
computes for the power to play (``h [B, L+1, H]``, already conditioned on that power by the
features), ``v = sigmoid(MLP(mean_l h_l))`` in (0, 1): the power's expected **score share**,
``score_p / sum_q score_q`` of the training scores (:func:`score_shares`; the seven shares of
a game sum to 1, parity is 1/7). Imitation trains it on the corpus games' outcomes and GRPO on
its games' final scores, each as an auxiliary MSE beside the policy loss
(:mod:`leaguezero.diplomacy.train.value_loss`); :func:`calibration` reports how well it
predicts (and decision-time search reads it to value positions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn


class ValueHead(nn.Module):
    """``h [B, L+1, H]`` (row L the "none" slot) -> predicted score share ``[B]`` in (0, 1)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pooled = h[:, :-1].mean(dim=1)  # [B, H] over the map's locations
        return torch.sigmoid(self.out(torch.relu(self.hidden(pooled)))).squeeze(-1)


def score_shares(scores: Mapping[str, float]) -> dict[str, float]:
    """Each power's share of the game's total score (all equal when every score is 0)."""
    total = sum(scores.values())
    if total <= 0:
        return dict.fromkeys(scores, 1.0 / max(len(scores), 1))
    return {power: score / total for power, score in scores.items()}


def calibration(
    predicted: Sequence[float], realised: Sequence[float], bins: int = 5
) -> dict[str, object]:
    """How well predictions match outcomes: the MSE, the MSE of the constant that predicts the
    realised mean (what the value head must beat), their ratio as ``r2`` (1 - mse / baseline),
    and per bin of equal width in prediction, the count, mean predicted and mean realised."""
    pred = np.asarray(predicted, dtype=np.float64)
    real = np.asarray(realised, dtype=np.float64)
    if len(pred) == 0:
        return {"n": 0, "mse": None, "baseline_mse": None, "r2": None, "bins": []}
    mse = float(np.mean((pred - real) ** 2))
    baseline = float(np.mean((real - real.mean()) ** 2))
    top = max(float(pred.max()), 1e-9)
    edges = np.linspace(0.0, top, bins + 1)
    which = np.clip(np.searchsorted(edges, pred, side="right") - 1, 0, bins - 1)
    rows = []
    for b in range(bins):
        sel = which == b
        if sel.any():
            rows.append(
                {
                    "range": [round(float(edges[b]), 4), round(float(edges[b + 1]), 4)],
                    "n": int(sel.sum()),
                    "predicted": round(float(pred[sel].mean()), 4),
                    "realised": round(float(real[sel].mean()), 4),
                }
            )
    r2 = 1.0 - mse / baseline if baseline > 0 else None
    return {
        "n": len(pred),
        "mse": round(mse, 6),
        "baseline_mse": round(baseline, 6),
        "r2": None if r2 is None else round(r2, 4),
        "bins": rows,
    }
