"""The event-keyed dice stream (docs/reference/design.md#rules-actions-and-dice) and the fast RNG
mode."""

from __future__ import annotations

from collections import Counter

import numpy as np

from leaguezero.yatzy.game import rules, tables
from leaguezero.yatzy.game.rules import S_DICE, S_RNG, STATE_LEN


def _state_with_dice(dice, seed=11, mode=rules.DICE_KEYED):
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, seed, mode)
    state[S_DICE] = tables.dice_index(dice)
    return state


def test_same_event_same_values():
    a = [rules.keyed_die(5, 1, 3, 2, j) for j in range(5)]
    b = [rules.keyed_die(5, 1, 3, 2, j) for j in range(5)]
    assert a == b and all(1 <= v <= 6 for v in a)
    # Any field of the key changes the stream.
    others = [
        [rules.keyed_die(*key, j) for j in range(5)]
        for key in [(6, 1, 3, 2), (5, 0, 3, 2), (5, 1, 4, 2), (5, 1, 3, 1)]
    ]
    assert sum(o != a for o in others) >= 3


def test_rerolling_either_of_two_equal_dice_gives_the_same_outcome():
    # Sorted 2 2 4 5 6: masks 0b01111 and 0b10111 each reroll one of the two 2s.
    s1 = _state_with_dice([2, 2, 4, 5, 6])
    s2 = s1.copy()
    rules.apply_action(s1, 0b01111)
    rules.apply_action(s2, 0b10111)
    assert s1[S_DICE] == s2[S_DICE]


def test_reroll_takes_the_first_k_values_of_the_event():
    seed = 99
    state = _state_with_dice([1, 1, 1, 1, 1], seed=seed)
    rules.apply_action(state, 0b11000)  # keep two 1s, reroll three: roll_idx 1, round 0
    first3 = [int(rules.keyed_die(seed, 0, 0, 1, j)) for j in range(3)]
    assert list(tables.DICE[state[S_DICE]]) == sorted([1, 1, *first3])


def test_keyed_dice_are_uniform():
    counts = Counter(
        int(rules.keyed_die(seed, 0, 0, 0, j)) for seed in range(4000) for j in range(5)
    )
    n = sum(counts.values())
    chi2 = sum((counts[f] - n / 6) ** 2 / (n / 6) for f in range(1, 7))
    assert chi2 < 20.5  # p ~ 0.001 with 5 degrees of freedom


def test_rng_mode_is_uniform_and_does_not_touch_the_keyed_stream():
    state = _state_with_dice([1, 2, 3, 4, 5], seed=3, mode=rules.DICE_RNG)
    faces = Counter()
    for _ in range(3000):
        s = state.copy()
        s[S_RNG] = (state[S_RNG] + 7919 * _) & 0xFFFFFFFF
        rules.apply_action(s, 0)  # reroll all five
        faces.update(int(v) for v in tables.DICE[s[S_DICE]])
    n = sum(faces.values())
    chi2 = sum((faces[f] - n / 6) ** 2 / (n / 6) for f in range(1, 7))
    assert chi2 < 20.5
    s = state.copy()
    rules.apply_action(s, 0)
    assert s[S_RNG] != state[S_RNG]  # the generator advanced
