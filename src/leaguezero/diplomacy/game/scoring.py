"""Final scores of a Diplomacy game: the training score and sum-of-squares
(docs/reference/design.md#training-score).

- :func:`calculate_final_scores` is the reward used for training and ratings: each power scores
  its supply centres plus half its units, and a single centre leader with at least
  ``winner_threshold_sc`` centres gets ``win_bonus`` on top (no bonus when the lead is shared).
- :func:`sum_of_squares_scores` is the evaluation score Diplomacy research reports: a power
  with a solo (``solo_sc`` centres or more) scores 1 and everyone else 0; otherwise a power
  scores C_i² / Σ_j C_j², so the scores of a game sum to 1.
- :func:`win_shares` says who won a game by a score: the powers tied for the highest score share
  one win (1/k each for a k-way tie); a single top scorer gets 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def running_scores(game: Any) -> dict[str, float]:
    """Per power: ``len(centers) + 0.5 * len(units)``, the final score without the bonus."""
    return {
        name: len(power.centers) + 0.5 * len(power.units) for name, power in game.powers.items()
    }


def calculate_final_scores(
    game: Any, win_bonus: float = 5.0, winner_threshold_sc: int = 10
) -> dict[str, float]:
    """Per power: ``len(centers) + 0.5 * len(units)``, plus ``win_bonus`` for a clear winner.

    ``game`` is a ``diplomacy.Game`` (anything with ``powers[name].centers/.units``). The bonus
    goes to the power with the most centres only if no other power has as many and it has at
    least ``winner_threshold_sc`` of them, as docs/reference/design.md#training-score says.
    """
    scores = running_scores(game)
    center_counts = {name: len(power.centers) for name, power in game.powers.items()}
    max_sc = max(center_counts.values())
    leaders = [name for name, count in center_counts.items() if count == max_sc]
    if max_sc >= winner_threshold_sc and len(leaders) == 1:
        scores[leaders[0]] += win_bonus
    return scores


def sum_of_squares_scores(game: Any, solo_sc: int = 18) -> dict[str, float]:
    """Sum-of-squares score per power: 1 for a solo, else C_i² / Σ_j C_j² (0 if no centres)."""
    center_counts = {name: len(power.centers) for name, power in game.powers.items()}
    soloists = [name for name, count in center_counts.items() if count >= solo_sc]
    if soloists:
        # Two powers cannot both hold 18 of 34 centres; with a lower solo_sc the top one solos.
        top = max(soloists, key=lambda name: center_counts[name])
        return {name: 1.0 if name == top else 0.0 for name in center_counts}
    total = sum(count * count for count in center_counts.values())
    if total == 0:
        return dict.fromkeys(center_counts, 0.0)
    return {name: count * count / total for name, count in center_counts.items()}


def win_shares(scores: Mapping[str, float]) -> dict[str, float]:
    """The win each power gets from ``scores``: 1/k to each of the k top scorers, else 0."""
    best = max(scores.values())
    top = [name for name, score in scores.items() if score == best]
    return {name: (1.0 / len(top) if name in top else 0.0) for name in scores}
