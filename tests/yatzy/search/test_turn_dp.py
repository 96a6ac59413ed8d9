"""The turn search's DP: fed the solver's table it must be the oracle, move for move."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.yatzy.game.features import encode
from leaguezero.yatzy.game.rules import S_AVAIL, S_DICE, S_REROLLS, S_UPPER, STATE_LEN
from leaguezero.yatzy.game.tables import FULL_AVAIL, NUM_DICE_SETS, SCORES, avail_bit
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, encode_turn
from leaguezero.yatzy.oracle import dp as D
from leaguezero.yatzy.oracle.solver import Oracle, load_oracle
from leaguezero.yatzy.search import turn_dp as T
from tests.yatzy.oracle.test_oracle_adapter import random_board


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return load_oracle()


def board_states(seed: int = 13, boards: int = 208) -> np.ndarray:
    """The 624-state set: 208 random reachable boards x rerolls_left 2, 1, 0, random dice."""
    rng = np.random.default_rng(seed)
    states = np.zeros((3 * boards, STATE_LEN), dtype=np.int64)
    for b in range(boards):
        avail, upper = random_board(rng)
        for r in range(3):
            i = 3 * b + r
            states[i, S_AVAIL], states[i, S_UPPER] = avail, upper
            states[i, S_DICE], states[i, S_REROLLS] = rng.integers(0, NUM_DICE_SETS), 2 - r
    return states


def dice_states(rerolls_left: int) -> np.ndarray:
    """The 252-dice set: every roll on the empty board with ``rerolls_left``."""
    states = np.zeros((NUM_DICE_SETS, STATE_LEN), dtype=np.int64)
    states[:, S_AVAIL] = FULL_AVAIL
    states[:, S_DICE] = np.arange(NUM_DICE_SETS)
    states[:, S_REROLLS] = rerolls_left
    return states


def assert_same_moves(oracle: Oracle, states: np.ndarray) -> None:
    rows = np.arange(len(states), dtype=np.int64)
    ours, theirs = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
    T.solitaire_turn_actions(oracle.values, states, rows, ours)
    D.oracle_actions(oracle.values, states, rows, theirs)
    np.testing.assert_array_equal(ours, theirs)


def test_slots_cover_every_category_score() -> None:
    assert T.NUM_SLOTS == 120
    for cat in range(15):
        for d in range(NUM_DICE_SETS):
            s = T.DICE_SLOT[d, cat]
            assert T.SLOT_CAT[s] == cat and T.SLOT_POINTS[s] == SCORES[d, cat]


def test_turn_dp_with_the_solver_table_plays_the_oracle_on_624_states(oracle: Oracle) -> None:
    assert_same_moves(oracle, board_states())


@pytest.mark.parametrize("rerolls_left", [2, 1, 0])
def test_turn_dp_with_the_solver_table_plays_the_oracle_on_252_rolls(
    oracle: Oracle, rerolls_left: int
) -> None:
    assert_same_moves(oracle, dice_states(rerolls_left))


def test_turn_value_before_the_roll_is_the_solver_value(oracle: Oracle) -> None:
    rng = np.random.default_rng(5)
    succ = np.empty((1, T.NUM_SLOTS))
    tables = np.empty((T.TABLE_ROWS, 463))
    for _ in range(20):
        avail, upper = random_board(rng)
        T.solitaire_successor_values(oracle.values, avail, upper, succ[0])
        value = T.turn_tables_into(succ[0], avail, tables)
        assert value == pytest.approx(oracle.values[avail, upper], abs=1e-9)
    T.solitaire_successor_values(oracle.values, FULL_AVAIL, 0, succ[0])
    assert T.turn_tables_into(succ[0], FULL_AVAIL, tables) == pytest.approx(248.4399894, abs=1e-6)


def test_successors_encode_the_opponents_turn_start_and_value_the_last_mark() -> None:
    state = np.zeros((1, STATE_LEN), np.int64)
    # Player 1 to move with only Yatzy open; player 0 finished on 200 points, player 1 has 180.
    state[0, S_AVAIL], state[0, S_AVAIL + 1] = 0, avail_bit(14)
    state[0, 4], state[0, 5], state[0, 8] = 200, 180, 1
    feats = np.zeros((T.NUM_SLOTS, NUM_TURN_FEATURES), np.float32)
    row_of = np.zeros((1, T.NUM_SLOTS), np.int64)
    succ = np.zeros((1, T.NUM_SLOTS))
    assert T.successor_batch(state, np.zeros(1, np.int64), feats, row_of, succ, 0.0, 50.0) == 0
    yatzy_slots = np.flatnonzero(T.SLOT_CAT == 14)
    assert (row_of[0, yatzy_slots] == T.TERMINAL).all()
    assert succ[0, yatzy_slots].tolist() == [-1.0, 1.0]  # 0 points loses, 50 wins
    assert (row_of[0, np.flatnonzero(T.SLOT_CAT != 14)] == T.CLOSED).all()

    # Mid-match: a successor is the opponent's turn start seen by the opponent.
    state[0, S_AVAIL], state[0, S_AVAIL + 1] = FULL_AVAIL, FULL_AVAIL & ~avail_bit(0)
    state[0, S_UPPER + 1], state[0, 4], state[0, 5], state[0, 8] = 3, 0, 3, 0
    n = T.successor_batch(state, np.zeros(1, np.int64), feats, row_of, succ, 0.0, 50.0)
    assert n == T.NUM_SLOTS
    chance_20 = T.SLOT_OFFSET[13] + 15  # chance points 5..30: index 15 is 20 points
    assert T.SLOT_POINTS[chance_20] == 20
    expect = np.zeros((1, STATE_LEN), np.int64)
    expect[0, S_AVAIL], expect[0, S_AVAIL + 1] = FULL_AVAIL & ~avail_bit(13), state[0, 1]
    expect[0, S_UPPER + 1], expect[0, 4], expect[0, 5], expect[0, 8] = 3, 20, 3, 1
    np.testing.assert_array_equal(feats[row_of[0, chance_20]], encode_turn(expect[0]))


def test_turn_features_ignore_the_dice_and_see_the_board() -> None:
    a = np.zeros(STATE_LEN, np.int64)
    a[S_AVAIL], a[S_AVAIL + 1], a[S_DICE], a[S_REROLLS] = FULL_AVAIL, FULL_AVAIL, 7, 2
    b = a.copy()
    b[S_DICE], b[S_REROLLS] = 200, 1
    np.testing.assert_array_equal(encode_turn(a), encode_turn(b))
    assert not np.array_equal(encode(a), encode(b))  # schema 1 does see them
    c = a.copy()
    c[S_UPPER] = 12
    assert encode_turn(c)[30 + 12] == 1.0 and encode_turn(c)[30] == 0.0
