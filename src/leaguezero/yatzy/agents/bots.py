"""Baseline Yatzy bots as numba kernels over batches of states.

``random``: a uniformly random legal action (keep masks 0..30 and open marks alike).

``greedy`` (a sensible heuristic, not an optimiser; deterministic):

1. With no rerolls left, mark the open category that scores the most now. If every open
   category scores 0, scratch one in :data:`SCRATCH_ORDER` (cheap categories first).
2. With rerolls left, mark at once if an open yatzy, large straight or small straight scores.
3. Otherwise, if all five dice differ and a straight is open, keep one die of each face of the
   open straight that covers more of the dice (small 1-5 first on a tie) and reroll the rest.
4. Otherwise keep every die of the most frequent face (the higher face on a tie) and reroll the
   rest; if that would keep all five dice (illegal while rerolls remain), mark as in rule 1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    apply_action,
    is_terminal,
    legal_mask,
    mix32,
    new_match,
)
from leaguezero.yatzy.game.tables import COUNTS, DICE, MARK_OFFSET, NUM_ACTIONS, SCORES

# ones, twos, yatzy, threes, four_kind, large_straight, small_straight, two_pairs, fours,
# house, three_kind, fives, pair, sixes, chance
SCRATCH_ORDER = np.array([0, 1, 14, 2, 9, 11, 10, 7, 3, 12, 8, 4, 6, 5, 13], dtype=np.int64)
_CAT_YATZY, _CAT_LARGE, _CAT_SMALL = 14, 11, 10


@njit(cache=True)
def _is_open(avail, cat):
    return (avail >> (14 - cat)) & 1 == 1


@njit(cache=True)
def greedy_mark(avail, dice):
    """The greedy bot's mark action (32 + cat) for open categories ``avail`` and ``dice``."""
    best_cat = -1
    best_points = 0
    for cat in range(15):
        if _is_open(avail, cat) and SCORES[dice, cat] > best_points:
            best_points = SCORES[dice, cat]
            best_cat = cat
    if best_cat < 0:
        for i in range(15):
            if _is_open(avail, SCRATCH_ORDER[i]):
                best_cat = SCRATCH_ORDER[i]
                break
    return MARK_OFFSET + best_cat


@njit(cache=True)
def greedy_action(state):
    """The greedy bot's action for ``state`` (int64 [16]); see the module docstring."""
    player = state[S_PLAYER]
    avail = state[S_AVAIL + player]
    dice = state[S_DICE]
    if state[S_REROLLS] == 0:
        return greedy_mark(avail, dice)
    for cat in (_CAT_YATZY, _CAT_LARGE, _CAT_SMALL):
        if _is_open(avail, cat) and SCORES[dice, cat] > 0:
            return MARK_OFFSET + cat
    max_count = 0
    face = 0
    for f in range(6):
        if COUNTS[dice, f] >= max_count:
            max_count = COUNTS[dice, f]
            face = f + 1
    mask = 0
    if max_count == 1 and (_is_open(avail, _CAT_SMALL) or _is_open(avail, _CAT_LARGE)):
        # Five different faces: exactly one of 1 or 6 is missing; go for the open straight.
        lo = 1
        if not _is_open(avail, _CAT_SMALL) or (
            _is_open(avail, _CAT_LARGE) and COUNTS[dice, 0] == 0
        ):
            lo = 2
        for i in range(5):
            if lo <= DICE[dice, i] <= lo + 4:
                mask |= 1 << (4 - i)
    else:
        for i in range(5):
            if DICE[dice, i] == face:
                mask |= 1 << (4 - i)
    if mask == 31:
        return greedy_mark(avail, dice)
    return mask


@njit(cache=True)
def greedy_actions(states, rows, out):
    """Greedy actions for ``states[rows]`` into ``out`` (int64 [len(rows)])."""
    for j in range(rows.shape[0]):
        out[j] = greedy_action(states[rows[j]])


@njit(cache=True)
def random_actions(states, rows, rng_state, out):
    """Uniformly random legal actions for ``states[rows]``; ``rng_state`` int64 [1] advances."""
    legal = np.zeros(NUM_ACTIONS, dtype=np.bool_)
    for j in range(rows.shape[0]):
        n = legal_mask(states[rows[j]], legal)
        rng_state[0] = (rng_state[0] + 0x9E3779B9) & 0xFFFFFFFF
        pick = (mix32(rng_state[0]) * n) >> 32
        for a in range(NUM_ACTIONS):
            if legal[a]:
                if pick == 0:
                    out[j] = a
                    break
                pick -= 1


@njit(cache=True)
def random_playouts(seeds, dice_mode, scores):
    """Play one uniformly random 2-player game per seed; final scores into ``scores`` [n, 2].

    ``seeds`` int64 [n]. One state and one legal-mask buffer are reused for every game.
    """
    state = np.zeros(16, dtype=np.int64)
    rng_state = np.zeros(1, dtype=np.int64)
    legal = np.zeros(NUM_ACTIONS, dtype=np.bool_)
    for g in range(seeds.shape[0]):
        new_match(state, seeds[g], dice_mode)
        rng_state[0] = seeds[g] & 0xFFFFFFFF
        while not is_terminal(state):
            n = legal_mask(state, legal)
            rng_state[0] = (rng_state[0] + 0x9E3779B9) & 0xFFFFFFFF
            pick = (mix32(rng_state[0]) * n) >> 32
            for a in range(NUM_ACTIONS):
                if legal[a]:
                    if pick == 0:
                        apply_action(state, a)
                        break
                    pick -= 1
        scores[g, 0] = state[S_SCORE]
        scores[g, 1] = state[S_SCORE + 1]
