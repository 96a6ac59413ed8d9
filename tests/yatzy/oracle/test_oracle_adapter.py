"""The yatzy-solver adapter: conventions verified against the solver, not assumed."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, legal_mask_into, new_match
from leaguezero.yatzy.game.tables import (
    CATEGORIES,
    DICE,
    FULL_AVAIL,
    KEEP_ALL,
    KEEP_TO_KEPT,
    MARK_OFFSET,
    NUM_ACTIONS,
    SCORES,
    avail_bit,
    keep_bit,
)
from leaguezero.yatzy.oracle import solver as O


@pytest.fixture(scope="session")
def oracle() -> O.Oracle:
    return O.load_oracle()  # memoised per process; the table is built once into the cache


def random_board(rng: np.random.Generator) -> tuple[int, int]:
    """A reachable (avail_mask, upper_total): upper > 0 only with a filled upper category."""
    avail = int(rng.integers(1, FULL_AVAIL + 1))
    upper_filled = [c for c in range(6) if not avail & avail_bit(c)]
    upper = 0
    for c in upper_filled:
        upper += (c + 1) * int(rng.integers(0, 6))
    return avail, min(upper, 63)


def test_filled_bits_are_our_avail_bits_reversed_and_inverted() -> None:
    v = O.variant()
    assert list(v.categories[:6]) == ["ones", "twos", "threes", "fours", "fives", "sixes"]
    assert len(v.categories) == len(CATEGORIES) == 15
    for cat in range(15):
        avail = FULL_AVAIL & ~avail_bit(cat)
        arrays = v.situation_arrays([O.situation_notation(avail, 0, 0, 2)])
        assert int(arrays["filled"][0]) == O.avail_to_filled(avail) == 1 << cat
    masks = np.arange(FULL_AVAIL + 1)
    assert np.array_equal(O.filled_to_avail(O.avail_to_filled(masks)), masks)


def test_solver_scores_match_our_table_in_our_category_order() -> None:
    v = O.variant()
    for d in range(0, 252, 7):
        for cat, name in enumerate(v.categories):
            assert v.score(name, DICE[d].tolist()) == SCORES[d, cat]


def test_rolls_in_solver_notation_is_rerolls_left() -> None:
    state = np.zeros(STATE_LEN, dtype=np.int64)
    new_match(state, 3, DICE_RNG)
    dice = DICE[state[6]].tolist()
    start = O.variant().start_turn("upper 0 | filled -", dice)
    assert start == O.situation_notation(FULL_AVAIL, 0, int(state[6]), int(state[7]))
    assert "rolls 2" in start


def test_actions_map_both_ways_to_the_solver_legal_actions() -> None:
    rng = np.random.default_rng(1)
    v = O.variant()
    legal = np.zeros(NUM_ACTIONS, dtype=np.bool_)
    for _ in range(200):
        avail, upper = random_board(rng)
        dice, rerolls = int(rng.integers(0, 252)), int(rng.integers(0, 3))
        legal_mask_into(avail, rerolls, legal)
        ours = {O.action_to_code(dice, int(a)) for a in np.flatnonzero(legal)}
        sit = O.situation_notation(avail, upper, dice, rerolls)
        theirs = {v.action_code(a) for a in v.legal_actions(sit)}
        assert ours == theirs
        for code in theirs:
            a = O.code_to_action(dice, code)
            assert legal[a] and O.action_to_code(dice, a) == code
            if a < MARK_OFFSET:  # the smallest mask keeping that multiset
                same = np.flatnonzero(KEEP_TO_KEPT[dice, :KEEP_ALL] == KEEP_TO_KEPT[dice, a])
                assert a == same[0]
                kept = [int(DICE[dice, i]) for i in range(5) if a & keep_bit(i)]
                assert v.action_notation(code) == "keep " + (" ".join(map(str, kept)) or "-")
    with pytest.raises(O.OracleError):
        O.action_to_code(0, KEEP_ALL)
    with pytest.raises(O.OracleError):
        O.code_to_action(0, O.variant().action_code("keep 6"))  # dice 0 = 1 1 1 1 1: no 6


def test_exported_values_match_state_value_and_clamp_upper(oracle: O.Oracle) -> None:
    assert abs(oracle.expected_score - O.EXPECTED_START_VALUE) < 1e-6
    assert oracle.values[0, 0] == 0.0  # every category filled: nothing left to score
    rng = np.random.default_rng(2)
    for _ in range(100):
        avail, upper = random_board(rng)
        filled = O.situation_notation(avail, upper, 0, 0).split("| upper ")[1]
        assert oracle.values[avail, upper] == pytest.approx(
            oracle.solver.state_value(f"upper {filled}"), abs=1e-9
        )
    # Totals above 63 are the same board as 63 for the solver too (our clamp is harmless).
    sixes_filled = FULL_AVAIL & ~avail_bit(5)
    assert oracle.solver.state_value("upper 70 | filled sixes") == oracle.values[sixes_filled, 63]


def test_batch_option_values_match_the_notation_api(oracle: O.Oracle) -> None:
    rng = np.random.default_rng(3)
    states = np.zeros((60, STATE_LEN), dtype=np.int64)
    for i in range(len(states)):
        avail, upper = random_board(rng)
        states[i, [0, 2, 6, 7]] = avail, upper, rng.integers(0, 252), rng.integers(0, 3)
    values = oracle.option_values(states)
    for i, row in enumerate(states):
        sit = O.situation_notation(int(row[0]), int(row[2]), int(row[6]), int(row[7]))
        expected = np.full(NUM_ACTIONS, np.nan)
        for notation, value in oracle.solver.option_values(sit):
            code = O.variant().action_code(notation)
            if code < 15:
                expected[MARK_OFFSET + code] = value
            else:
                for mask in range(KEEP_ALL):
                    if O.action_to_code(int(row[6]), mask) == code:
                        expected[mask] = value
        np.testing.assert_array_equal(values[i], expected)


def test_impossible_boards_and_bad_tables_are_one_line_errors(tmp_path) -> None:
    with pytest.raises(O.OracleError, match="upper category"):
        O.check_board(FULL_AVAIL, 5)
    with pytest.raises(O.OracleError, match="15 bits"):
        O.check_board(1 << 15, 0)
    bad = tmp_path / "bad.table"
    bad.write_bytes(b"not a table")
    with pytest.raises(O.OracleError, match="cannot load oracle table"):
        O.load_oracle(bad)
    name = O.default_table_path().name
    assert "yatzy-scandinavian" in name and f"t{O.TABLE_FORMAT_VERSION}" in name


@pytest.mark.slow
def test_a_missing_table_is_built_once_and_appears_atomically(tmp_path) -> None:
    path = tmp_path / "cache" / "t.table"
    messages: list[str] = []
    assert O.ensure_table(path, progress=messages.append) == path
    assert path.is_file() and len(messages) == 1 and str(path) in messages[0]
    O.ensure_table(path, progress=messages.append)
    assert len(messages) == 1  # found, not rebuilt
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert abs(O.load_oracle(path).expected_score - O.EXPECTED_START_VALUE) < 1e-6
