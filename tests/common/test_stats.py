from __future__ import annotations

import numpy as np
import pytest

from leaguezero.common.stats import elo_to_score, paired_summary, sprt_paired


def test_paired_summary_counts_and_se():
    a = np.array([[10, 20], [30, 30], [5, 50]])
    b = np.array([[5, 25], [30, 10], [6, 40]])
    s = paired_summary(a, b)
    assert (s.games, s.pairs, s.a_wins, s.draws, s.b_wins) == (6, 3, 3, 1, 2)
    assert s.a_win_rate == pytest.approx(3.5 / 6)
    diffs = np.array([0.0, 10.0, 4.5])
    assert s.score_diff_mean == pytest.approx(diffs.mean())
    assert s.score_diff_se == pytest.approx(diffs.std(ddof=1) / np.sqrt(3))


def test_elo_to_score():
    assert elo_to_score(0) == 0.5
    assert elo_to_score(400) == pytest.approx(10 / 11)


def test_sprt_accepts_a_clearly_better_candidate_and_rejects_an_equal_one():
    rng = np.random.default_rng(0)
    better = rng.choice([0, 0.5, 1.0], size=3000, p=[0.3, 0.1, 0.6])  # ~65%
    assert sprt_paired(better[:400], 0, 15).decision == "H1"
    equal = rng.choice([0, 0.5, 1.0], size=20000, p=[0.45, 0.1, 0.45])
    assert sprt_paired(equal, 0, 15).decision == "H0"
    assert sprt_paired(equal[:10], 0, 15).decision == "continue"


def test_sprt_error_rates_are_roughly_as_configured():
    rng = np.random.default_rng(1)
    s0 = elo_to_score(0)
    false_promotions = 0
    for _ in range(200):
        x = rng.choice([0.0, 1.0], size=6000, p=[1 - s0, s0])
        for n in range(100, 6001, 100):
            d = sprt_paired(x[:n], 0, 30, alpha=0.05, beta=0.05).decision
            if d != "continue":
                false_promotions += d == "H1"
                break
    assert false_promotions / 200 < 0.12  # alpha = 0.05 with checks every 100 pairs
