"""Rules: scoring parity with yatzy-solver, golden conventions, kernels vs the reference.

Also run by CI with NUMBA_DISABLE_JIT=1, so keep it quick in pure Python.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from leaguezero.yatzy.game import reference, rules, tables
from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    STATE_LEN,
)


def test_scores_match_yatzy_solver_for_every_roll_and_category():
    ys = pytest.importorskip("yatzy_solver")
    variant = ys.Variant("yatzy-scandinavian")
    assert len(variant.categories) == 15
    for i, dice in enumerate(tables.DICE):
        values = [int(v) for v in dice]
        for cat, name in enumerate(variant.categories):
            assert tables.SCORES[i, cat] == variant.score(name, values), (values, name)


def test_category_order_golden():
    assert tables.CATEGORIES == (
        "ones", "twos", "threes", "fours", "fives", "sixes", "pair", "two_pairs",
        "three_kind", "four_kind", "small_straight", "large_straight", "house", "chance",
        "yatzy",
    )  # fmt: skip
    ys = pytest.importorskip("yatzy_solver")
    solver_names = ys.Variant("yatzy-scandinavian").categories
    assert [n.split("_")[0] for n in solver_names][:6] == list(tables.CATEGORIES[:6])


def test_avail_mask_bit_is_14_minus_cat():
    assert [tables.avail_bit(c) for c in range(15)] == [1 << (14 - c) for c in range(15)]
    # Marking "ones" clears bit 14; marking "yatzy" clears bit 0.
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, 3, rules.DICE_KEYED)
    rules.apply_action(state, 32 + 0)
    assert state[S_AVAIL] == tables.FULL_AVAIL & ~(1 << 14)
    rules.apply_action(state, 32 + 14)  # player 1 marks yatzy
    assert state[S_AVAIL + 1] == tables.FULL_AVAIL & ~1


def test_keep_mask_bit_is_4_minus_i_over_sorted_dice():
    dice = tables.dice_index([6, 1, 3, 3, 5])  # sorted: 1 3 3 5 6
    assert reference.kept_dice([1, 3, 3, 5, 6], 0b10000) == [1]
    assert reference.kept_dice([1, 3, 3, 5, 6], 0b00001) == [6]
    kept = tables.KEEP_TO_KEPT[dice, 0b10001]  # keep 1 and 6
    assert list(tables.KEPT_COUNTS[kept]) == [1, 0, 0, 0, 0, 1]
    assert tables.action_label(0b01100, [1, 3, 3, 5, 6]) == "keep 01100 (3 3)"


def test_upper_bonus_exactly_when_crossing_62_to_63():
    sixes = tables.dice_index([6, 6, 6, 1, 2])  # 18 in sixes
    avail = tables.FULL_AVAIL
    assert rules.mark_points(avail, 44, sixes, 5) == (18, 62)  # 44 + 18 = 62: no bonus
    assert rules.mark_points(avail, 45, sixes, 5) == (18 + 50, 63)  # 63: bonus
    assert rules.mark_points(avail, 50, sixes, 5) == (18 + 50, 63)  # 68 clamps to 63
    assert rules.mark_points(avail, 63, sixes, 5) == (18, 63)  # already earned: once only
    assert rules.mark_points(avail, 62, sixes, 6) == (2 * 6, 62)  # lower section: no bonus


def test_keep_all_illegal_only_while_rerolls_remain():
    out = np.zeros(47, np.bool_)
    for rerolls in (2, 1):
        rules.legal_mask_into(tables.FULL_AVAIL, rerolls, out)
        assert not out[31] and out[:31].all() and out[32:].all()
    rules.legal_mask_into(tables.FULL_AVAIL, 0, out)
    assert not out[:32].any() and out[32:].all()
    rules.legal_mask_into(0b100000000000001, 0, out)  # only ones and yatzy open
    assert np.flatnonzero(out).tolist() == [32, 46]


def test_score_kernel_matches_reference_on_random_dice():
    rng = random.Random(1)
    dice = np.array([[rng.randint(1, 6) for _ in range(5)] for _ in range(300)], np.int64)
    out = np.zeros((len(dice), 15), np.int64)
    rules.scores_for_dice_batch(dice, out)
    for row, scores in zip(dice.tolist(), out.tolist(), strict=True):
        assert scores == reference.scores_for_dice(row)


def test_reroll_distributions_are_exact():
    for kept in range(tables.NUM_KEPT):
        final, prob = tables.reroll_distribution(kept)
        assert prob.sum() == pytest.approx(1.0, abs=1e-12)
        assert len(set(final.tolist())) == len(final)
    # Keeping four sixes: five sixes with probability 1/6.
    kept = tables.KEEP_TO_KEPT[tables.dice_index([6, 6, 6, 6, 1]), 0b01111]
    final, prob = tables.reroll_distribution(kept)
    p = dict(zip(final.tolist(), prob.tolist(), strict=True))
    assert p[tables.dice_index([6, 6, 6, 6, 6])] == pytest.approx(1 / 6)
    # A fresh roll: 252 outcomes, yatzy of any face 6/7776.
    final, prob = tables.reroll_distribution(tables.EMPTY_KEPT)
    assert len(final) == 252
    assert prob[final == tables.dice_index([2] * 5)][0] == pytest.approx(1 / 7776)


def _keyed_roll(seed):
    def roll(player, round_idx, roll_idx, k):
        return [int(rules.keyed_die(seed, player, round_idx, roll_idx, j)) for j in range(k)]

    return roll


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 5])
def test_match_kernel_matches_reference_match(seed):
    """Random trajectories: the numba match and the reference agree state by state."""
    rng = random.Random(seed)
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, seed, rules.DICE_KEYED)
    ref = reference.Match(_keyed_roll(seed))
    legal = np.zeros(47, np.bool_)
    while not ref.terminal():
        rules.legal_mask(state, legal)
        assert np.flatnonzero(legal).tolist() == ref.legal()
        assert list(tables.DICE[state[S_DICE]]) == ref.dice
        assert state[S_REROLLS] == ref.rerolls_left and state[S_PLAYER] == ref.player
        action = rng.choice(ref.legal())
        assert rules.apply_action(state, action) == ref.step(action)
        for p in range(2):
            assert state[S_AVAIL + p] == ref.boards[p].avail
            assert state[S_UPPER + p] == ref.boards[p].upper
            assert state[S_SCORE + p] == ref.boards[p].score
    assert rules.is_terminal(state)
    assert rules.legal_mask(state, legal) == 0


def test_illegal_action_raises():
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, 1, rules.DICE_KEYED)
    with pytest.raises(ValueError):
        rules.apply_action(state, 31)
    rules.apply_action(state, 32)
    with pytest.raises(ValueError):
        rules.apply_action(state, 47)


def test_all_252_multisets_indexed():
    seen = {tables.dice_index(d) for d in itertools.product(range(1, 7), repeat=5)}
    assert seen == set(range(252))


def test_policy_mask_keeps_one_mask_per_kept_multiset():
    rng = random.Random(3)
    out = np.zeros(47, np.bool_)
    full = np.zeros(47, np.bool_)
    for _ in range(200):
        state = np.zeros(STATE_LEN, np.int64)
        rules.new_match(state, rng.randrange(2**40), rules.DICE_KEYED)
        state[S_DICE] = rng.randrange(252)
        state[S_REROLLS] = rng.choice([0, 1, 2])
        n = rules.policy_mask(state, out)
        rules.legal_mask(state, full)
        assert n == out.sum() and not (out & ~full).any()  # a subset of the legal actions
        assert (out[32:] == full[32:]).all()  # marks untouched
        dice = [int(v) for v in tables.DICE[state[S_DICE]]]
        if state[S_REROLLS] == 0:
            assert not out[:32].any()
            continue
        kept_of = {m: tuple(reference.kept_dice(dice, m)) for m in range(31)}
        chosen = [m for m in range(31) if out[m]]
        assert len({kept_of[m] for m in chosen}) == len(chosen)  # no two equivalent masks
        assert {kept_of[m] for m in chosen} == set(kept_of.values())  # every keep represented
        assert all(m == min(k for k in range(31) if kept_of[k] == kept_of[m]) for m in chosen)
