"""Numba kernels of the turn search: a turn's successors, and the exact DP inside the turn.

A Yatzy turn ends with a mark, and what a mark leaves behind depends only on the category and
the points it scored: the mover's board changes, the opponent's does not. So a turn has few
distinct *successors* — one per (open category, points value): 6 per upper category, 2 for a
straight, 26 for chance, :data:`NUM_SLOTS` (= 120) in all on an empty board — however the dice
fall. Given the value of each successor from the mover's point of view (``succ`` float64
[NUM_SLOTS]; a slot of a filled category is never read), the rest of the turn is a small exact
expectimax over the 252 dice multisets, the same one the solitaire oracle runs
(:mod:`leaguezero.yatzy.oracle.dp`), only with ``succ`` in place of ``points + V[next board]``:

* ``mark[d] = max over open c of succ[slot(c, points of d in c)]``;
* ``keep1[k]`` = expected ``mark`` after keeping ``k`` and rerolling; ``best1[d]`` = max of
  marking now and the best keep with one reroll left; ``keep2``, ``best2`` likewise;
* the turn's value before the first roll = the expectation of ``best2`` over a fresh roll.

With ``succ`` filled from the oracle's solitaire table (:func:`solitaire_successor_values`) the
kernels reproduce the oracle's action values to the bit and therefore its moves (tested); with
a network's values for the opponent's turn start they are the turn search of 2-player play.

Ties go to the lowest action index, exactly as in :func:`leaguezero.yatzy.oracle.dp.choose`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_MARKS,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
)
from leaguezero.yatzy.game.tables import (
    EMPTY_KEPT,
    KEEP_ALL,
    KEEP_TO_KEPT,
    MARK_OFFSET,
    NUM_ACTIONS,
    NUM_CATEGORIES,
    NUM_DICE_SETS,
    NUM_KEPT,
    SCORES,
    UPPER_BONUS,
    UPPER_BONUS_THRESHOLD,
)
from leaguezero.yatzy.game.turn_features import encode_turn_into
from leaguezero.yatzy.oracle.dp import (
    NEG,
    best_after_keep_into,
    choose,
    keep_values_into,
)

CLOSED = -2  # row_of value: the slot's category is filled (never read)
TERMINAL = -1  # row_of value: the mark ends the match; the slot holds the exact result


def _slot_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    points_of = [np.unique(SCORES[:, cat]) for cat in range(NUM_CATEGORIES)]
    offset = np.zeros(NUM_CATEGORIES + 1, np.int64)
    for cat in range(NUM_CATEGORIES):
        offset[cat + 1] = offset[cat] + len(points_of[cat])
    slot_cat = np.zeros(offset[-1], np.int64)  # [S] category of each slot
    slot_points = np.zeros(offset[-1], np.int64)  # [S] raw points (bonus excluded)
    dice_slot = np.zeros((NUM_DICE_SETS, NUM_CATEGORIES), np.int64)  # [252, 15] slot of (d, c)
    for cat in range(NUM_CATEGORIES):
        slot_cat[offset[cat] : offset[cat + 1]] = cat
        slot_points[offset[cat] : offset[cat + 1]] = points_of[cat]
        dice_slot[:, cat] = offset[cat] + np.searchsorted(points_of[cat], SCORES[:, cat])
    return offset, slot_cat, slot_points, dice_slot


SLOT_OFFSET, SLOT_CAT, SLOT_POINTS, DICE_SLOT = _slot_tables()
NUM_SLOTS = int(SLOT_OFFSET[-1])  # 120
DICE_SLOT_T = np.ascontiguousarray(DICE_SLOT.T)  # [15, 252]: contiguous rows for the mark loop

# Scratch layout of one game's DP tables (float64 [TABLE_ROWS, NUM_KEPT + 1]).
T_MARK, T_BEST1, T_BEST2, T_KEEP1, T_KEEP2, T_SCRATCH, T_EXPECT = range(7)
TABLE_ROWS = 7


@njit(cache=True, inline="always")
def _after_mark(avail, upper, score, cat, raw_points):
    """(avail, upper, score) of a board after marking ``cat`` for ``raw_points`` (+ bonus)."""
    points = raw_points
    new_upper = upper
    if cat < 6:
        new_upper = min(UPPER_BONUS_THRESHOLD, upper + raw_points)
        if upper < UPPER_BONUS_THRESHOLD <= upper + raw_points:
            points += UPPER_BONUS
    return avail & ~(1 << (14 - cat)), new_upper, score + points


@njit(cache=True)
def final_utility(diff, margin_weight, margin_scale):
    """Utility in [-1, 1] of a finished match won by ``diff`` points (the search's formula)."""
    value = 1.0 if diff > 0 else (-1.0 if diff < 0 else 0.0)
    if margin_weight > 0.0:
        value = (value + margin_weight * math.tanh(diff / margin_scale)) / (1.0 + margin_weight)
    return value


@njit(cache=True)
def successor_batch(states, rows, feats, row_of, succ, margin_weight, margin_scale):
    """Enumerate the successors of the turns of ``states[rows]`` for one batched evaluation.

    For row ``j`` and slot ``s`` (an open category and a points value) writes ``row_of[j, s]``
    (int64 [n, NUM_SLOTS]): the feature row of the successor — the opponent's turn start,
    encoded from the opponent's view into ``feats`` (float32 [>= n * NUM_SLOTS, 169]) — or
    :data:`TERMINAL` when the mark ends the match (``succ[j, s]`` then holds the exact utility
    for the mover), or :data:`CLOSED`. Returns the number of feature rows written.
    """
    k = 0
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        me = state[S_PLAYER]
        opp = 1 - me
        avail, upper, score = state[S_AVAIL + me], state[S_UPPER + me], state[S_SCORE + me]
        o_avail, o_upper, o_score = state[S_AVAIL + opp], state[S_UPPER + opp], state[S_SCORE + opp]
        for s in range(NUM_SLOTS):
            cat = SLOT_CAT[s]
            if not (avail >> (14 - cat)) & 1:
                row_of[j, s] = CLOSED
                continue
            n_avail, n_upper, n_score = _after_mark(avail, upper, score, cat, SLOT_POINTS[s])
            if n_avail == 0 and o_avail == 0:
                row_of[j, s] = TERMINAL
                succ[j, s] = final_utility(n_score - o_score, margin_weight, margin_scale)
                continue
            encode_turn_into(o_avail, o_upper, o_score, n_avail, n_upper, n_score, opp, feats[k])
            row_of[j, s] = k
            k += 1
    return k


@njit(cache=True)
def successor_positions(states, rows, positions, row_of, succ, margin_weight, margin_scale):
    """As :func:`successor_batch`, but each successor is written as a compact position row
    (int32 [>= n * NUM_SLOTS, 9]: the state fields ``S_AVAIL`` .. ``S_PLAYER``, opponent to
    roll, dice 0, rerolls 2) for a server that encodes positions itself
    (:mod:`leaguezero.yatzy.game.positions`); same rows, same order, same ``row_of``."""
    k = 0
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        me = state[S_PLAYER]
        opp = 1 - me
        avail, upper, score = state[S_AVAIL + me], state[S_UPPER + me], state[S_SCORE + me]
        o_avail, o_score = state[S_AVAIL + opp], state[S_SCORE + opp]
        for s in range(NUM_SLOTS):
            cat = SLOT_CAT[s]
            if not (avail >> (14 - cat)) & 1:
                row_of[j, s] = CLOSED
                continue
            n_avail, n_upper, n_score = _after_mark(avail, upper, score, cat, SLOT_POINTS[s])
            if n_avail == 0 and o_avail == 0:
                row_of[j, s] = TERMINAL
                succ[j, s] = final_utility(n_score - o_score, margin_weight, margin_scale)
                continue
            out = positions[k]
            for i in range(S_PLAYER + 1):
                out[i] = state[i]
            out[S_AVAIL + me] = n_avail
            out[S_UPPER + me] = n_upper
            out[S_SCORE + me] = n_score
            out[S_DICE] = 0
            out[S_REROLLS] = 2
            out[S_PLAYER] = opp
            row_of[j, s] = k
            k += 1
    return k


@njit(cache=True)
def successor_states(states, rows, row_of, out):
    """The successor positions themselves (for a deeper search): ``out[row_of[j, s]]`` (int64
    [>= k, 16]) = ``states[rows[j]]`` after marking slot ``s``, the opponent to roll (dice 0,
    rerolls 2). ``row_of`` as filled by :func:`successor_batch`."""
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        me = state[S_PLAYER]
        avail, upper, score = state[S_AVAIL + me], state[S_UPPER + me], state[S_SCORE + me]
        for s in range(NUM_SLOTS):
            r = row_of[j, s]
            if r < 0:
                continue
            for i in range(state.shape[0]):
                out[r, i] = state[i]
            n_avail, n_upper, n_score = _after_mark(
                avail, upper, score, SLOT_CAT[s], SLOT_POINTS[s]
            )
            out[r, S_AVAIL + me] = n_avail
            out[r, S_UPPER + me] = n_upper
            out[r, S_SCORE + me] = n_score
            out[r, S_MARKS] = state[S_MARKS] + 1
            out[r, S_PLAYER] = 1 - me
            out[r, S_DICE] = 0
            out[r, S_REROLLS] = 2


@njit(cache=True)
def fill_successor_values(row_of, values, succ):
    """``succ[j, s] = -values[row_of[j, s]]`` for evaluated slots (the opponent's value, negated:
    utilities are antisymmetric). ``values`` float32 [rows] from the opponent's view."""
    for j in range(row_of.shape[0]):
        for s in range(NUM_SLOTS):
            r = row_of[j, s]
            if r >= 0:
                succ[j, s] = -float(values[r])


@njit(cache=True)
def solitaire_successor_values(values, avail, upper, out):
    """``out[s]`` = points (bonus included) + ``values[next board]``: the oracle's mark value.

    ``values`` float64 [32768, 64] (the solver's turn-start table). With these successors the
    turn DP is the solitaire oracle (the check that the DP is right, apart from learning).
    """
    for s in range(NUM_SLOTS):
        cat = SLOT_CAT[s]
        if not (avail >> (14 - cat)) & 1:
            out[s] = NEG
            continue
        rest, new_upper, points = _after_mark(avail, upper, 0, cat, SLOT_POINTS[s])
        out[s] = points + values[rest, new_upper]


@njit(cache=True)
def mark_table_into(succ, avail, out):
    """``out[d]`` (float64 [252]) = best mark value of dice ``d`` given successor values."""
    for d in range(NUM_DICE_SETS):
        out[d] = NEG
    for cat in range(NUM_CATEGORIES):
        if not (avail >> (14 - cat)) & 1:
            continue
        slots = DICE_SLOT_T[cat]
        for d in range(NUM_DICE_SETS):
            out[d] = max(out[d], succ[slots[d]])


@njit(cache=True)
def turn_tables_into(succ, avail, tables):
    """Fill one game's DP tables (float64 [TABLE_ROWS, 463]); returns the turn's value before
    its first roll (expectation over the 252 rolls of the best play)."""
    mark = tables[T_MARK, :NUM_DICE_SETS]
    best1 = tables[T_BEST1, :NUM_DICE_SETS]
    best2 = tables[T_BEST2, :NUM_DICE_SETS]
    keep1 = tables[T_KEEP1, :NUM_KEPT]
    keep2 = tables[T_KEEP2, :NUM_KEPT]
    scratch = tables[T_SCRATCH]
    expect = tables[T_EXPECT, :NUM_KEPT]
    mark_table_into(succ, avail, mark)
    keep_values_into(mark, keep1)
    best_after_keep_into(mark, keep1, scratch, best1)
    keep_values_into(best1, keep2)
    best_after_keep_into(mark, keep2, scratch, best2)
    keep_values_into(best2, expect)
    return expect[EMPTY_KEPT]


@njit(cache=True)
def turn_action_values_into(succ, tables, avail, dice, rerolls_left, out):
    """Every action's value (float64 [47], NaN if illegal) from filled tables and ``succ``."""
    for a in range(NUM_ACTIONS):
        out[a] = np.nan
    if rerolls_left > 0:
        keep = tables[T_KEEP2] if rerolls_left == 2 else tables[T_KEEP1]
        for mask in range(KEEP_ALL):
            out[mask] = keep[KEEP_TO_KEPT[dice, mask]]
    for cat in range(NUM_CATEGORIES):
        if (avail >> (14 - cat)) & 1:
            out[MARK_OFFSET + cat] = succ[DICE_SLOT[dice, cat]]


@njit(cache=True)
def turn_decisions(states, rows, succ, tables, action_values, turn_values, actions):
    """The DP for ``states[rows]`` given their successor values ``succ`` (float64 [n, S]).

    Writes every action's value (float64 [n, 47], NaN if illegal), the turn's pre-roll value
    (float64 [n]) and the best action (int64 [n], lowest index on ties). ``tables`` float64
    [TABLE_ROWS, 463] scratch.
    """
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        avail = state[S_AVAIL + state[S_PLAYER]]
        turn_values[j] = turn_tables_into(succ[j], avail, tables)
        turn_action_values_into(
            succ[j], tables, avail, state[S_DICE], state[S_REROLLS], action_values[j]
        )
        actions[j] = choose(action_values[j])


@njit(cache=True)
def solitaire_turn_actions(values, states, rows, out):
    """Moves of the turn DP fed the oracle's table (int64 [n]): must equal the oracle's."""
    succ = np.empty((1, NUM_SLOTS))
    tables = np.empty((TABLE_ROWS, NUM_KEPT + 1))
    action_values = np.empty((1, NUM_ACTIONS))
    turn_value = np.empty(1)
    one = np.zeros(1, np.int64)
    action = np.zeros(1, np.int64)
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        me = state[S_PLAYER]
        solitaire_successor_values(values, state[S_AVAIL + me], state[S_UPPER + me], succ[0])
        one[0] = rows[j]
        turn_decisions(states, one, succ, tables, action_values, turn_value, action)
        out[j] = action[0]
