"""Statistics for paired, side-swapped 2-player evaluation (one implementation, used by
``yz match``, gating and the league evaluator)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class PairedSummary:
    games: int
    pairs: int
    a_wins: int
    draws: int
    b_wins: int
    a_win_rate: float  # a draw counts half
    a_win_rate_se: float  # standard error of a_win_rate over pairs
    a_score_mean: float
    b_score_mean: float
    score_diff_mean: float  # mean over pairs of (A's score - B's score), averaged per pair
    score_diff_se: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def paired_summary(a_scores: np.ndarray, b_scores: np.ndarray) -> PairedSummary:
    """Summarise paired games: ``a_scores``/``b_scores`` float [pairs, 2], one row per seed.

    Column 0 is the game where A sits in seat 0, column 1 the swapped game. Standard errors
    are over pairs (the independent unit), so the pairing's variance reduction shows up in them.
    """
    a_scores = np.asarray(a_scores, dtype=np.float64).reshape(-1, 2)
    b_scores = np.asarray(b_scores, dtype=np.float64).reshape(-1, 2)
    pairs = a_scores.shape[0]
    if pairs == 0:
        raise ValueError("paired_summary needs at least one pair of games")
    points = (a_scores > b_scores) + 0.5 * (a_scores == b_scores)  # [pairs, 2]
    per_pair_points = points.mean(axis=1)
    per_pair_diff = (a_scores - b_scores).mean(axis=1)

    def se(x: np.ndarray) -> float:
        return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")

    return PairedSummary(
        games=2 * pairs,
        pairs=pairs,
        a_wins=int((a_scores > b_scores).sum()),
        draws=int((a_scores == b_scores).sum()),
        b_wins=int((a_scores < b_scores).sum()),
        a_win_rate=float(points.mean()),
        a_win_rate_se=se(per_pair_points),
        a_score_mean=float(a_scores.mean()),
        b_score_mean=float(b_scores.mean()),
        score_diff_mean=float(per_pair_diff.mean()),
        score_diff_se=se(per_pair_diff),
    )
