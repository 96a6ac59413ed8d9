"""Ratings: the design's pairwise multi-player Elo (2-player Elo is its n = 2 case), and a batch
maximum-likelihood refit over the whole match log (:func:`fit_ratings`).

The scale is the usual Elo one: a 400-point gap means the stronger side is expected to score
10 times as much as the weaker (expected score 1 / (1 + 10 ** (-gap / 400)),
:func:`leaguezero.common.stats.elo_to_score`, the one place that curve is written).
:func:`relative_ratings` puts ratings on the scale users read next to the absolute one:
``base_model`` (the untrained starting point) = 0.

Every rating rule of the project is here; each caller asks a different question of it:

- a table's games, one after another (:func:`update_elo_multiplayer`): a tournament's
  ``ratings`` (``diplomacy eval``'s JSON), where every seat's rating moves;
- a league's evaluation games, one after another (:func:`apply_elo_sequential`): the
  evaluator's online ratings (``league.rating: elo``);
- the whole match log at once (:func:`fit_ratings`, Bradley-Terry by maximum likelihood): the
  evaluator's ``league.rating: refit`` and ``leaguezero league ratings``;
- the live hero against frozen opponents (:func:`rate_against_fixed`): the training session's
  rating of the hero from its training games, the opponents' ratings left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from leaguezero.common.stats import elo_to_score
from leaguezero.league.types import BASE_MODEL, MatchResult

RELATIVE_TO = BASE_MODEL  # the agent every shown relative rating is measured from


def relative_ratings(
    ratings: Mapping[str, float], reference: str = RELATIVE_TO
) -> dict[str, float] | None:
    """Each rating minus ``reference``'s (``reference`` = 0), or None when ``reference`` has no
    rating in ``ratings`` (then only absolute ratings are shown).

    The one place relative ratings are computed: ``leaguezero league show``, ``diplomacy
    train-report``, the Elo chart and the web run page all call it. Only differences of Elo
    ratings mean anything (the anchor pins an arbitrary zero), so "+250 over base_model" says
    how much training gained whatever the anchor's rating is.
    """
    if reference not in ratings:
        return None
    zero = float(ratings[reference])
    return {name: float(value) - zero for name, value in ratings.items()}


def expected_score(rating_a: float, rating_b: float) -> float:
    """Elo expected score of A against B."""
    return elo_to_score(rating_a - rating_b)


def update_elo_multiplayer(
    game_results: Mapping[str, float],
    elo_ratings: Mapping[str, float],
    k: float = 32.0,
) -> dict[str, float]:
    """Pairwise multi-player Elo after one game (docs/reference/design.md#evaluator).

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


def update_elo_pair(
    rating_a: float, rating_b: float, score_a: float, k: float = 32.0
) -> tuple[float, float]:
    """2-player Elo: ``score_a`` is 1 (A won), 0.5 (draw) or 0; returns (new_a, new_b)."""
    delta = k * (score_a - expected_score(rating_a, rating_b))
    return rating_a + delta, rating_b - delta


def apply_elo_sequential(
    results: Iterable[MatchResult],
    elo_ratings: Mapping[str, float],
    k: float = 32.0,
    default_elo: float = 1000.0,
) -> dict[str, float]:
    """Run :func:`update_elo_multiplayer` over ``results`` in order (the online Elo).

    Clones of one agent in a match (cluster sampling) count as that agent with their mean
    score. Agents without a rating start at ``default_elo``. The result depends on the order
    of the results; :func:`fit_ratings` is the order-free batch alternative.
    """
    ratings = {name: float(r) for name, r in elo_ratings.items()}
    for result in results:
        scores = result.scores_by_agent()
        for name in scores:
            ratings.setdefault(name, float(default_elo))
        ratings = update_elo_multiplayer(scores, ratings, k)
    return ratings


def rate_against_fixed(
    agent: str,
    rating: float,
    results: Iterable[MatchResult],
    opponents: Mapping[str, float],
    k: float = 32.0,
    default_elo: float = 1000.0,
) -> float:
    """``agent``'s online Elo after ``results``, its opponents' ratings held fixed.

    Each game is :func:`update_elo_multiplayer` over its distinct agents (clones averaged, as in
    :func:`apply_elo_sequential`) and only ``agent``'s change is kept: the way a live hero is
    rated from its own games against a league whose ratings the evaluator owns. Games without
    ``agent``, or with no other agent, leave the rating as it is.
    """
    rating = float(rating)
    for result in results:
        scores = result.scores_by_agent()
        if agent not in scores or len(scores) < 2:
            continue
        ratings = {name: float(opponents.get(name, default_elo)) for name in scores}
        ratings[agent] = rating
        rating = update_elo_multiplayer(scores, ratings, k)[agent]
    return rating


# ----- batch maximum-likelihood refit (Bradley–Terry on the Elo scale) ---------------------

ELO_PER_NAT = 400.0 / math.log(10.0)  # Elo points per unit of natural log-odds


@dataclass(frozen=True)
class RatingFit:
    """A batch rating fit. ``ratings``/``low``/``high`` are on the Elo scale; ``low``/``high``
    are the bootstrap percentile interval (empty without bootstrap; the anchor's is a point).
    ``games`` is each agent's weighted number of pairwise games (a 7-seat game counts 1)."""

    ratings: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    games: dict[str, float]
    anchor: str
    anchor_elo: float
    bootstrap: int
    confidence: float

    def intervals(self) -> dict[str, tuple[float, float]]:
        return {name: (self.low[name], self.high[name]) for name in self.low}


@dataclass
class _Pairs:
    """Flattened pairwise outcomes: one row per (seat, seat) pair of distinct agents."""

    first: np.ndarray  # [P] int64, agent index of A
    second: np.ndarray  # [P] int64, agent index of B
    score: np.ndarray  # [P] float64, A's score 1 / 0.5 / 0
    weight: np.ndarray  # [P] float64, 1 / (seats - 1)
    match: np.ndarray  # [P] int64, index of the match the pair came from
    matches: int


def _flatten(results: Sequence[MatchResult], index: Mapping[str, int]) -> _Pairs:
    rows: list[tuple[int, int, float, float, int]] = []
    for m, result in enumerate(results):
        for a, b, score_a, weight in result.pairwise_outcomes():
            rows.append((index[a], index[b], score_a, weight, m))
    arr = np.array(rows, dtype=np.float64).reshape(-1, 5)
    return _Pairs(
        first=arr[:, 0].astype(np.int64),
        second=arr[:, 1].astype(np.int64),
        score=arr[:, 2],
        weight=arr[:, 3],
        match=arr[:, 4].astype(np.int64),
        matches=len(results),
    )


def _newton_bt(
    wins: np.ndarray,  # [n, n] float64, weighted score of i against j
    games: np.ndarray,  # [n, n] float64, weighted games between i and j (symmetric)
    anchor: int,
    prior_precision: float,  # 1 / prior_sd**2 in nats**-2
    theta0: np.ndarray,  # [n] float64, starting point in nats (anchor entry is 0)
    max_iter: int = 100,
    tol: float = 1e-10,
) -> np.ndarray:
    """Maximise the penalised Bradley–Terry log-likelihood with the anchor fixed at 0.

    Objective: sum_ij wins_ij log sigmoid(t_i - t_j) - prior_precision/2 * sum_i t_i**2.
    It is strictly concave for prior_precision > 0, so Newton with step halving converges.
    """
    n = wins.shape[0]
    free = np.arange(n) != anchor
    theta = theta0.copy()
    theta[anchor] = 0.0
    if not free.any():
        return theta

    def objective(t: np.ndarray) -> float:
        diff = t[:, None] - t[None, :]
        return float(np.sum(wins * -np.logaddexp(0.0, -diff)) - 0.5 * prior_precision * t @ t)

    current = objective(theta)
    for _ in range(max_iter):
        diff = theta[:, None] - theta[None, :]
        p = 1.0 / (1.0 + np.exp(-diff))  # [n, n] P(i beats j)
        grad = (wins - games * p).sum(axis=1) - prior_precision * theta
        curv = games * p * (1.0 - p)  # [n, n]
        hess = curv - np.diag(curv.sum(axis=1) + prior_precision)
        g, h = grad[free], hess[np.ix_(free, free)]
        step = np.linalg.solve(h, -g)  # ascent direction, h is negative definite
        scale = 1.0
        while True:
            trial = theta.copy()
            trial[free] += scale * step
            value = objective(trial)
            if value >= current - 1e-12 or scale < 1e-8:
                break
            scale *= 0.5
        theta, current = trial, value
        if np.max(np.abs(scale * step)) < tol:
            break
    return theta


def fit_ratings(
    results: Iterable[MatchResult],
    *,
    anchor: str,
    anchor_elo: float,
    agents: Iterable[str] = (),
    prior_sd: float = 1000.0,
    bootstrap: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
) -> RatingFit:
    """Maximum-likelihood ratings from a whole match log (batch Bradley–Terry refit).

    Model: A beats B with probability ``1 / (1 + 10 ** ((r_B - r_A) / 400))`` — the Elo
    expectation — for every pair of seats with distinct agents in every match; a tie counts as
    half a win each, and a pair's weight is ``1 / (seats - 1)`` as in the design's multi-player
    Elo. The scale is pinned by holding ``anchor`` at ``anchor_elo``. A Gaussian prior with
    standard deviation ``prior_sd`` Elo around the anchor's rating keeps agents that never
    lost (or never won), or that are not connected to the anchor by any chain of games,
    finite; at 1000 Elo it moves well-measured ratings by a negligible amount.

    Unlike online Elo, the result depends only on the multiset of results, not their order,
    and can be recomputed from the match log after a restart. With ``bootstrap`` > 0, matches
    (the independent unit; a 7-seat game is one) are resampled with replacement that many
    times and ``low``/``high`` are the central ``confidence`` percentile interval.

    ``agents`` adds names that should get a rating even with no games (they get the prior
    mean). Raises ``ValueError`` for a non-positive ``prior_sd`` or bad ``confidence``.
    """
    if prior_sd <= 0:
        raise ValueError(f"prior_sd must be positive, got {prior_sd}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    results = list(results)
    names = list(dict.fromkeys([anchor, *agents, *(n for r in results for n in r.agents)]))
    index = {name: i for i, name in enumerate(names)}
    a = index[anchor]
    n = len(names)
    pairs = _flatten(results, index)
    prior_precision = (ELO_PER_NAT / prior_sd) ** 2

    def solve(match_weight: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = pairs.weight * match_weight[pairs.match]  # [P]
        wins = np.zeros((n, n))
        games = np.zeros((n, n))
        np.add.at(wins, (pairs.first, pairs.second), w * pairs.score)
        np.add.at(wins, (pairs.second, pairs.first), w * (1.0 - pairs.score))
        np.add.at(games, (pairs.first, pairs.second), w)
        games = games + games.T
        return _newton_bt(wins, games, a, prior_precision, start), games

    theta, games = solve(np.ones(pairs.matches), np.zeros(n))
    elo = anchor_elo + ELO_PER_NAT * theta
    ratings = {name: float(elo[i]) for name, i in index.items()}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    if bootstrap > 0 and pairs.matches > 0:
        rng = np.random.default_rng(seed)
        samples = np.empty((bootstrap, n))
        for b in range(bootstrap):
            counts = rng.multinomial(pairs.matches, np.full(pairs.matches, 1.0 / pairs.matches))
            samples[b] = anchor_elo + ELO_PER_NAT * solve(counts.astype(np.float64), theta)[0]
        tail = 100.0 * (1.0 - confidence) / 2.0
        lo, hi = np.percentile(samples, [tail, 100.0 - tail], axis=0)
        low = {name: float(lo[i]) for name, i in index.items()}
        high = {name: float(hi[i]) for name, i in index.items()}
    return RatingFit(
        ratings=ratings,
        low=low,
        high=high,
        games={name: float(games[i].sum()) for name, i in index.items()},
        anchor=anchor,
        anchor_elo=float(anchor_elo),
        bootstrap=int(bootstrap) if pairs.matches else 0,
        confidence=confidence,
    )
