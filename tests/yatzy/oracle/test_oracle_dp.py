"""The numba turn DP against an obvious plain-Python reference and against the solver."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.yatzy.game.rules import STATE_LEN
from leaguezero.yatzy.game.tables import (
    FULL_AVAIL,
    KEEP_ALL,
    KEEP_TO_KEPT,
    KEPT_SIZE,
    NUM_ACTIONS,
    SCORES,
    avail_bit,
    reroll_distribution,
)
from leaguezero.yatzy.oracle import dp as D
from leaguezero.yatzy.oracle.solver import Oracle, load_oracle

from .test_oracle_adapter import random_board


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return load_oracle()


def reference_turn(values: np.ndarray, avail: int, upper: int):
    """The textbook turn DP over the explicit reroll distributions (slow, obvious)."""

    def mark_value(d: int, cat: int) -> float:
        points = int(SCORES[d, cat])
        new_upper = upper
        if cat < 6:
            new_upper = min(63, upper + points)
            if upper < 63 <= upper + points:
                points += 50
        return points + values[avail & ~avail_bit(cat), new_upper]

    open_cats = [c for c in range(15) if avail & avail_bit(c)]
    mark = np.array([max(mark_value(d, c) for c in open_cats) for d in range(252)])

    def expect(after: np.ndarray) -> np.ndarray:
        out = np.full(462, np.nan)
        for k in range(462):
            if KEPT_SIZE[k] < 5:
                to, prob = reroll_distribution(k)
                out[k] = float(np.dot(prob, after[to]))
        return out

    keep1 = expect(mark)
    best1 = np.array(
        [max(mark[d], *(keep1[KEEP_TO_KEPT[d, m]] for m in range(KEEP_ALL))) for d in range(252)]
    )
    return mark, keep1, best1, expect(best1)


def test_turn_tables_match_the_reference(oracle: Oracle) -> None:
    rng = np.random.default_rng(0)
    mark, best1 = np.empty(252), np.empty(252)
    keep1, keep2, scratch = np.empty(462), np.empty(462), np.empty(463)
    small = KEPT_SIZE < 5
    for _ in range(12):
        avail, upper = random_board(rng)
        D.turn_tables_into(oracle.values, avail, upper, 2, mark, keep1, best1, keep2, scratch)
        ref_mark, ref_keep1, ref_best1, ref_keep2 = reference_turn(oracle.values, avail, upper)
        np.testing.assert_allclose(mark, ref_mark, rtol=0, atol=1e-9)
        np.testing.assert_allclose(keep1[small], ref_keep1[small], rtol=0, atol=1e-9)
        np.testing.assert_allclose(best1, ref_best1, rtol=0, atol=1e-9)
        np.testing.assert_allclose(keep2[small], ref_keep2[small], rtol=0, atol=1e-9)


def test_first_turn_expectation_is_the_start_value(oracle: Oracle) -> None:
    # E over the first roll of the best value with two rerolls left = V(empty board).
    mark, best1 = np.empty(252), np.empty(252)
    keep1, keep2, scratch = np.empty(462), np.empty(462), np.empty(463)
    D.turn_tables_into(oracle.values, FULL_AVAIL, 0, 2, mark, keep1, best1, keep2, scratch)
    states = np.zeros((252, STATE_LEN), dtype=np.int64)
    states[:, 0], states[:, 6], states[:, 7] = FULL_AVAIL, np.arange(252), 2
    values = np.empty((252, NUM_ACTIONS))
    D.oracle_action_values(oracle.values, states, np.arange(252), values)
    to, prob = reroll_distribution(0)
    assert float(np.dot(prob, np.nanmax(values, axis=1)[to])) == pytest.approx(
        oracle.expected_score, abs=1e-9
    )


def test_action_values_match_the_solver(oracle: Oracle) -> None:
    rng = np.random.default_rng(1)
    states = np.zeros((300, STATE_LEN), dtype=np.int64)
    for i in range(len(states)):
        avail, upper = random_board(rng)
        states[i, [0, 2, 6, 7]] = avail, upper, rng.integers(0, 252), rng.integers(0, 3)
    ours = np.empty((len(states), NUM_ACTIONS))
    D.oracle_action_values(oracle.values, states, np.arange(len(states)), ours)
    np.testing.assert_allclose(ours, oracle.option_values(states), rtol=0, atol=1e-9)


def test_choose_takes_the_lowest_index_among_ties() -> None:
    values = np.full(NUM_ACTIONS, np.nan)
    values[[3, 7, 40]] = [10.0, 10.0 + 0.5 * D.TIE_EPS, 9.0]
    assert D.choose(values) == 3
    values[7] = 10.0 + 3 * D.TIE_EPS
    assert D.choose(values) == 7
    values[:] = np.nan
    values[40] = -5.0
    assert D.choose(values) == 40
