"""Analytic tests of the online Elo and the batch Bradley–Terry refit."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from leaguezero.league.rating import (
    apply_elo_sequential,
    expected_score,
    fit_ratings,
    update_elo_multiplayer,
    update_elo_pair,
)
from leaguezero.league.types import MatchResult, Participant


def _game(*agent_scores: tuple[str, float]) -> MatchResult:
    return MatchResult(
        participants=tuple(Participant(a, i, s) for i, (a, s) in enumerate(agent_scores))
    )


# ----- online Elo ---------------------------------------------------------------------------


def test_two_player_is_the_special_case_of_multiplayer():
    for ra, rb, (sa, sb) in [(1000, 1000, (1, 0)), (1200, 900, (0, 1)), (1500, 1400, (3, 3))]:
        multi = update_elo_multiplayer({"a": sa, "b": sb}, {"a": ra, "b": rb}, k=24)
        score_a = 1.0 if sa > sb else 0.5 if sa == sb else 0.0
        pair = update_elo_pair(ra, rb, score_a, k=24)
        assert multi["a"] == pytest.approx(pair[0]) and multi["b"] == pytest.approx(pair[1])


def test_multiplayer_scales_by_k_over_n_minus_one_and_conserves_rating():
    ratings = {p: 1000.0 for p in "ABCDEFG"}
    results = {p: float(i) for i, p in enumerate("ABCDEFG")}  # G best, A worst
    new = update_elo_multiplayer(results, ratings, k=32)
    # The winner beat six equal players: 6 * (32 / 6) * (1 - 0.5) = 16.
    assert new["G"] == pytest.approx(1016.0) and new["A"] == pytest.approx(984.0)
    assert new["D"] == pytest.approx(1000.0)
    assert sum(new.values()) == pytest.approx(7000.0)


def test_symmetric_results_keep_equal_ratings_equal():
    ratings = {p: 1000.0 for p in "ABC"}
    for _ in range(10):
        ratings = update_elo_multiplayer({"A": 2.0, "B": 2.0, "C": 2.0}, ratings)
    assert ratings == {p: 1000.0 for p in "ABC"}
    # Each of three players takes each rank once per cycle: the order-free refit is exact.
    log = [
        _game(*zip(order, (3.0, 2.0, 1.0), strict=True)) for order in itertools.permutations("ABC")
    ]
    fit = fit_ratings(log * 5, anchor="A", anchor_elo=1000.0)
    for p in "ABC":
        assert fit.ratings[p] == pytest.approx(1000.0, abs=1e-6)


def test_always_winning_player_rises_monotonically():
    ratings = {"hero": 1000.0, "a": 1000.0, "b": 1100.0}
    history = [ratings["hero"]]
    # The refit sees a fixed background of a-vs-b games plus the hero's growing record.
    log = [_game(("a", float(i % 3)), ("b", 1.0)) for i in range(30)]
    refits = []
    for i in range(40):
        opponent = "a" if i % 2 else "b"
        game = _game(("hero", 1.0), (opponent, 0.0))
        ratings = update_elo_multiplayer(game.scores_by_agent(), ratings)
        history.append(ratings["hero"])
        log.append(game)
        refits.append(fit_ratings(log, anchor="a", anchor_elo=1000.0).ratings["hero"])
    assert all(later > earlier for earlier, later in itertools.pairwise(history))
    assert all(later > earlier for earlier, later in itertools.pairwise(refits))
    assert np.isfinite(refits[-1])  # the prior keeps the undefeated finite


def test_sequential_elo_depends_on_order_but_refit_does_not():
    rng = random.Random(3)
    strengths = {"a": 0.0, "b": 150.0, "c": 300.0}
    log = []
    for _ in range(300):
        x, y = rng.sample(sorted(strengths), 2)
        win = rng.random() < expected_score(strengths[x], strengths[y])
        log.append(_game((x, float(win)), (y, float(not win))))
    shuffled = log[:]
    rng.shuffle(shuffled)
    start = dict.fromkeys(strengths, 1000.0)
    seq1, seq2 = apply_elo_sequential(log, start), apply_elo_sequential(shuffled, start)
    assert max(abs(seq1[p] - seq2[p]) for p in strengths) > 1.0
    fit1 = fit_ratings(log, anchor="a", anchor_elo=1000.0)
    fit2 = fit_ratings(shuffled, anchor="a", anchor_elo=1000.0)
    for p in strengths:
        assert fit1.ratings[p] == pytest.approx(fit2.ratings[p], abs=1e-6)


# ----- batch refit -------------------------------------------------------------------------


def test_refit_two_players_matches_closed_form():
    # A scores 75% against B: the ML gap is 400 * log10(3) (prior negligible).
    log = [_game(("A", 1.0), ("B", 0.0))] * 300 + [_game(("A", 0.0), ("B", 1.0))] * 100
    fit = fit_ratings(log, anchor="B", anchor_elo=800.0, prior_sd=1e6)
    assert fit.ratings["B"] == 800.0
    assert fit.ratings["A"] == pytest.approx(800.0 + 400.0 * np.log10(3.0), abs=1e-6)
    assert fit.games["A"] == pytest.approx(400.0)


def test_ties_count_as_half_wins():
    log = [_game(("A", 1.0), ("B", 1.0))] * 10 + [_game(("A", 1.0), ("B", 0.0))] * 10
    fit = fit_ratings(log, anchor="B", anchor_elo=0.0, prior_sd=1e6)
    assert fit.ratings["A"] == pytest.approx(400.0 * np.log10(3.0), abs=1e-4)  # 15 of 20


def test_disconnected_and_unplayed_agents_stay_finite():
    log = [_game(("A", 1.0), ("B", 0.0))] * 5 + [_game(("C", 1.0), ("D", 0.0))] * 5
    fit = fit_ratings(log, anchor="A", anchor_elo=1000.0, agents=["E"])
    assert all(np.isfinite(v) for v in fit.ratings.values())
    assert fit.ratings["E"] == 1000.0 and fit.games["E"] == 0.0
    assert fit.ratings["C"] > fit.ratings["D"]
    assert fit.ratings["B"] < 1000.0


TRUTH = {"random": 800.0, "greedy": 1000.0, "c10": 1100.0, "c20": 1250.0, "c30": 1400.0}


def _synthetic_league(seed: int, games: int = 600) -> list[MatchResult]:
    """7-seat games with cluster-style repeated agents and known Bradley–Terry strengths."""
    rng = np.random.default_rng(seed)
    names = list(TRUTH)
    strength = np.array([10 ** (TRUTH[n] / 400.0) for n in names])
    log = []
    for _ in range(games):
        picks = rng.choice(len(names), size=7, replace=True)
        # Plackett–Luce finishing order: its pairwise marginals are exactly Bradley–Terry.
        remaining, order = list(range(7)), []
        while remaining:
            w = strength[picks[remaining]]
            j = rng.choice(len(remaining), p=w / w.sum())
            order.append(remaining.pop(j))
        score = np.empty(7)
        score[order] = np.arange(7, 0, -1)
        log.append(_game(*((names[picks[s]], float(score[s])) for s in range(7))))
    return log


def test_refit_recovers_known_strengths_within_bootstrap_intervals():
    fit = fit_ratings(_synthetic_league(7), anchor="random", anchor_elo=800.0, bootstrap=200)
    assert fit.ratings["random"] == 800.0 and fit.low["random"] == fit.high["random"] == 800.0
    for name, true in TRUTH.items():
        lo, hi = fit.intervals()[name]
        assert lo <= true <= hi, f"{name}: true {true} outside [{lo:.0f}, {hi:.0f}]"
        assert hi - lo < 120.0, f"{name}: interval too wide to mean anything"
    assert [n for n, _ in sorted(fit.ratings.items(), key=lambda kv: kv[1])] == list(TRUTH)


def test_bootstrap_intervals_are_calibrated_over_many_logs():
    """95% intervals over 10 independent logs x 4 free agents cover the truth >= 85% of the
    time (a single log can miss by chance; a miscalibrated interval misses far more often)."""
    covered = total = 0
    for seed in range(10):
        fit = fit_ratings(
            _synthetic_league(100 + seed, games=300),
            anchor="random",
            anchor_elo=800.0,
            bootstrap=100,
            seed=seed,
        )
        for name in list(TRUTH)[1:]:
            lo, hi = fit.intervals()[name]
            covered += lo <= TRUTH[name] <= hi
            total += 1
    assert covered / total >= 0.85, f"coverage {covered}/{total}"


def test_bootstrap_is_seeded_and_errors_are_clear():
    log = [_game(("A", 1.0), ("B", 0.0)), _game(("A", 0.0), ("B", 1.0))] * 10
    f1 = fit_ratings(log, anchor="A", anchor_elo=0.0, bootstrap=20, seed=5)
    f2 = fit_ratings(log, anchor="A", anchor_elo=0.0, bootstrap=20, seed=5)
    assert f1.intervals() == f2.intervals()
    with pytest.raises(ValueError, match="prior_sd"):
        fit_ratings(log, anchor="A", anchor_elo=0.0, prior_sd=0.0)
    with pytest.raises(ValueError, match="confidence"):
        fit_ratings(log, anchor="A", anchor_elo=0.0, confidence=1.0)
    empty = fit_ratings([], anchor="A", anchor_elo=5.0, bootstrap=10)
    assert empty.ratings == {"A": 5.0} and empty.low == {}


def test_relative_ratings_put_base_model_at_zero_or_are_none_without_it():
    from leaguezero.league.rating import relative_ratings

    rel = relative_ratings({"random_bot": 800.0, "base_model": 1000.0, "ckpt_000010": 1234.5})
    assert rel == {"random_bot": -200.0, "base_model": 0.0, "ckpt_000010": 234.5}
    assert relative_ratings({"random_bot": 800.0, "ckpt_000010": 900.0}) is None
    assert relative_ratings({"a": 5.0, "b": 7.0}, reference="b") == {"a": -2.0, "b": 0.0}
