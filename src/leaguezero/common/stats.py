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


Z95 = 1.959964  # two-sided 95% normal quantile


def wilson_interval(rate: float, games: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a win rate over ``games`` games (a tie's 1/k counts as its
    share). Unlike rate ± z SE it stays inside [0, 1] and is not a point when every game was won
    or lost: 7 wins of 7 is 0.65-1.0 (a Diplomacy bench floor of 0.95 is not passed), 0 of 200
    is 0-0.019."""
    if games < 1:
        return 0.0, 1.0
    denom = 1.0 + z * z / games
    centre = (rate + z * z / (2 * games)) / denom
    half = z * math.sqrt(rate * (1.0 - rate) / games + z * z / (4 * games * games)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def elo_to_score(elo: float) -> float:
    """Expected score of a player ``elo`` points stronger (Elo's logistic curve)."""
    return 1.0 / (1.0 + 10.0 ** (-elo / 400.0))


@dataclass(frozen=True)
class SprtResult:
    llr: float
    lower: float  # accept H0 (no promotion) at or below
    upper: float  # accept H1 (promote) at or above
    decision: str  # "H1" | "H0" | "continue"


def sprt_paired(
    pair_points: np.ndarray,
    elo0: float,
    elo1: float,
    alpha: float = 0.05,
    beta: float = 0.05,
) -> SprtResult:
    """Sequential probability ratio test on side-swapped pairs (fishtest's normal GSPRT).

    ``pair_points`` float [pairs]: each pair's mean score for the candidate (0, 0.25, ..., 1;
    draws count half). H0: the candidate is ``elo0`` stronger; H1: ``elo1`` stronger. Using
    pairs as the unit keeps the variance reduction of side-swapping in the test. With the
    per-pair variance ``var``, the log-likelihood ratio of the normal approximation is
    ``n (s1 - s0) (2 mean - s0 - s1) / (2 var)``; stop when it leaves ``[ln(b/(1-a)),
    ln((1-b)/a)]``. Yatzy is noisy: telling 52% from 50% takes thousands of games, so a fixed
    40-200 game gate decides nothing and this test stops as soon as the evidence suffices.
    """
    x = np.asarray(pair_points, dtype=np.float64)
    lower = math.log(beta / (1 - alpha))
    upper = math.log((1 - beta) / alpha)
    n = len(x)
    if n < 2:
        return SprtResult(0.0, lower, upper, "continue")
    s0, s1 = elo_to_score(elo0), elo_to_score(elo1)
    var = max(float(x.var()), 1e-6)
    llr = n * (s1 - s0) * (2 * float(x.mean()) - s0 - s1) / (2 * var)
    decision = "H1" if llr >= upper else "H0" if llr <= lower else "continue"
    return SprtResult(llr, lower, upper, decision)
