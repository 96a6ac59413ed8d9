"""Credit assignment for GRPO: which advantage each action record of a group's games gets
(``train.credit``; see :mod:`.grpo`'s module doc for the update that uses them).

- ``game``: every record of a game gets the game's group-relative score (:func:`group_advantages`);
- ``phase``: a record of phase t gets the score gained from t on, less that phase's group mean
  (:func:`phase_advantages`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from leaguezero.diplomacy.game.records import PlayedGame


def group_advantages(scores: torch.Tensor, eps: float = 1e-6, scale: bool = True) -> torch.Tensor:
    """Group-relative advantages ``(s - mean) / (std + eps)`` along the last axis.

    ``scores``: ``[..., G]`` hero final scores of the G games of a group. Population std
    (``unbiased=False``), so a group of identical scores gives zeros, not NaN. ``scale=False``:
    ``s - mean`` (Dr. GRPO).
    """
    mean = scores.mean(dim=-1, keepdim=True)
    if not scale:
        return scores - mean
    std = scores.std(dim=-1, unbiased=False, keepdim=True)
    return (scores - mean) / (std + eps)


def phase_advantages(
    group: Sequence[PlayedGame], eps: float = 1e-6, scale: bool = True
) -> list[list[float]]:
    """Per-record advantages with per-phase credit (``credit="phase"``; see module doc).

    A record of phase t in game g is credited with the seat's score gained from t on,
    ``R_gt = final_g - start_gt``, less the mean of ``R_g't`` over the group's games that
    acted in phase t, divided by the root mean square of those residuals over the group (a
    phase only one game reached gives no residual and is left out of the scale;
    ``scale=False``: not divided, Dr. GRPO). Returns one list per game, aligned with its
    :attr:`~PlayedGame.seat_records`.
    """
    togo: list[dict[str, float]] = []
    for game in group:
        records = game.seat_records
        if records and not game.phase_start:
            raise ValueError("credit='phase' needs each game's phase_start")
        start = game.seat_phase_start
        togo.append({r.phase: game.score - start[r.phase] for r in records})
    by_phase: dict[str, list[float]] = {}
    for returns in togo:
        for phase, value in returns.items():
            by_phase.setdefault(phase, []).append(value)
    baseline = {phase: sum(v) / len(v) for phase, v in by_phase.items()}
    residuals = [{ph: v - baseline[ph] for ph, v in returns.items()} for returns in togo]
    shared = [r for res in residuals for ph, r in res.items() if len(by_phase[ph]) > 1]
    scale_by = math.sqrt(sum(r * r for r in shared) / len(shared)) if shared else 0.0
    if not scale:
        scale_by, eps = 1.0, 0.0
    return [
        [res[r.phase] / (scale_by + eps) for r in game.seat_records]
        for res, game in zip(residuals, group, strict=True)
    ]


def _game_credit(group, scores, seat_records, eps, scale=True):
    """``credit="game"``: every record of a game gets the game's group-normalised score."""
    adv = group_advantages(scores, eps, scale).tolist()
    per_record = [[a] * len(r) for a, r in zip(adv, seat_records, strict=True)]
    return per_record, [abs(a) for a in adv]


def _phase_credit(group, scores, seat_records, eps, scale=True):
    """``credit="phase"``: :func:`phase_advantages`."""
    per_record = phase_advantages(group, eps, scale)
    return per_record, [sum(abs(a) for a in advs) / max(1, len(advs)) for advs in per_record]


# credit -> (group, scores, seat records, eps, scale) -> (per-record advantages,
# per-game |advantage|)
CREDIT_RULES = {"game": _game_credit, "phase": _phase_credit}
CREDITS = tuple(CREDIT_RULES)
