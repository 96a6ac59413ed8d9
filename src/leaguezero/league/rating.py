"""Ratings: the spec's pairwise multi-player Elo (2-player Elo is its n = 2 case).

The scale is the usual Elo one: a 400-point gap means the stronger side is expected to score
10 times as much as the weaker (expected score 1 / (1 + 10 ** (-gap / 400))).
"""

from __future__ import annotations

from collections.abc import Mapping


def expected_score(rating_a: float, rating_b: float) -> float:
    """Elo expected score of A against B."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))


def update_elo_multiplayer(
    game_results: Mapping[str, float],
    elo_ratings: Mapping[str, float],
    k: float = 32.0,
) -> dict[str, float]:
    """Pairwise multi-player Elo after one game (league spec §2).

    ``game_results``: {participant: final score} (higher is better; equal scores tie);
    ``elo_ratings``: {participant: rating before the game}. Every pair (A, B) of participants
    is an Elo game scored 1 / 0.5 / 0 by comparing their results; each pairwise delta is
    scaled by ``k / (n - 1)`` so a player's total change is on the scale of one 2-player game.
    All expectations use the ratings before the game, so the result does not depend on the
    order of the participants. Returns the new ratings of every key in ``elo_ratings``.

    Participants must be distinct keys; when one agent fills several seats (cluster sampling),
    aggregate per agent first or rate seats separately and average.
    """
    new = {name: float(r) for name, r in elo_ratings.items()}
    names = list(game_results)
    n = len(names)
    if n < 2:
        return new
    missing = [name for name in names if name not in elo_ratings]
    if missing:
        raise KeyError(f"no rating for {', '.join(missing)}")
    scale = k / (n - 1)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            exp_a = expected_score(elo_ratings[a], elo_ratings[b])
            if game_results[a] > game_results[b]:
                actual_a = 1.0
            elif game_results[a] == game_results[b]:
                actual_a = 0.5
            else:
                actual_a = 0.0
            delta = scale * (actual_a - exp_a)
            new[a] += delta
            new[b] -= delta
    return new


def update_elo_pair(rating_a: float, rating_b: float, score_a: float, k: float = 32.0):
    """2-player Elo: ``score_a`` is 1 (A won), 0.5 (draw) or 0; returns (new_a, new_b)."""
    delta = k * (score_a - expected_score(rating_a, rating_b))
    return rating_a + delta, rating_b - delta
