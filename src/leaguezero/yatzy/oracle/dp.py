"""Numba kernels that play a Yatzy turn optimally from the solver's turn-start values.

The solver's table gives ``V[avail_mask, upper_total]`` (float64 [32768, 64]): the optimal
expected remaining score at the start of a turn. Inside a turn the optimal play is a small DP
over the 252 dice multisets:

* ``mark[d]``: best over open categories of points (bonus included) + ``V`` of the next board;
* ``keep1[k]``: expected ``mark`` after keeping multiset ``k`` and rerolling the rest (one
  reroll left before the keep, none after); ``best1[d] = max(mark[d], max keep1 over keeps of d)``;
* ``keep2[k]``: expected ``best1`` after keeping ``k`` (two rerolls left before the keep).

Rerolling ``n`` dice is computed one die at a time: ``F[k] = mean over faces f of F[k + f]``
over kept multisets of decreasing size, 6 multiply-adds per multiset (1,260 per level) instead
of the 4,116 terms of the explicit reroll distribution. The best keep of a multiset is found the
same way: ``B[k] = max(F[k], B[k - f] for each face f in k)``.

Ties (within :data:`TIE_EPS`) go to the lowest action index: keep masks before marks, and among
masks that keep the same multiset the smallest mask. Same state, same action: the agent is
deterministic.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_UPPER,
    mark_points,
    mix32,
)
from leaguezero.yatzy.game.tables import (
    CODE_TO_KEPT,
    COUNTS,
    KEEP_ALL,
    KEEP_TO_KEPT,
    KEPT_CODE,
    KEPT_SIZE,
    KEPT_TO_DICE,
    MARK_OFFSET,
    NUM_ACTIONS,
    NUM_CATEGORIES,
    NUM_DICE_SETS,
    NUM_KEPT,
    POW6,
    SCORES,
    UPPER_BONUS,
    UPPER_BONUS_THRESHOLD,
)

TIE_EPS = 1e-9  # options closer than this are tied (the solver's f64 tie epsilon)
NEG = -1e300  # "no option" in max reductions


def _kept_moves() -> tuple[np.ndarray, np.ndarray]:
    add = np.full((NUM_KEPT, 6), -1, dtype=np.int64)  # [462, 6] kept + one die of face f
    # [462, 6] kept - one die of face f; NUM_KEPT (a sentinel slot) where the face is absent
    sub = np.full((NUM_KEPT, 6), NUM_KEPT, dtype=np.int64)
    for k in range(NUM_KEPT):
        for f in range(6):
            if KEPT_SIZE[k] < 5:
                add[k, f] = CODE_TO_KEPT[KEPT_CODE[k] + POW6[f]]
            if (KEPT_CODE[k] // POW6[f]) % 6 > 0:
                sub[k, f] = CODE_TO_KEPT[KEPT_CODE[k] - POW6[f]]
    return add, sub


KEPT_ADD, KEPT_SUB = _kept_moves()
FIRST_FIVE = int(np.flatnonzero(KEPT_SIZE == 5)[0])  # kept idx are ordered by size
DICE_OF_KEPT = np.maximum(KEPT_TO_DICE, 0)  # [462] dice idx of size-5 multisets (0 elsewhere)
COUNTS_T = np.ascontiguousarray(COUNTS.T)  # [6, 252] count of face f + 1 in each roll
SCORES_T = np.ascontiguousarray(SCORES.T)  # [15, 252] points of each roll per category


@njit(cache=True)
def mark_values_into(values, avail, upper, out):
    """``out[d]`` = best mark value of dice ``d`` (float64 [252]); NEG if nothing is open.

    ``values`` float64 [32768, 64]. Category-outer loops over contiguous rows of the transposed
    tables let LLVM vectorise the 252-wide max; an upper category has only 6 possible outcomes
    (its count of the face), looked up once per call.
    """
    outcome = np.empty(6)  # points + V after marking an upper category, by count of its face
    for d in range(NUM_DICE_SETS):
        out[d] = NEG
    for cat in range(NUM_CATEGORIES):
        if not (avail >> (14 - cat)) & 1:
            continue
        rest = avail & ~(1 << (14 - cat))
        if cat < 6:
            for count in range(6):
                points = count * (cat + 1)
                new_upper = min(UPPER_BONUS_THRESHOLD, upper + points)
                if upper < UPPER_BONUS_THRESHOLD <= upper + points:
                    points += UPPER_BONUS
                outcome[count] = points + values[rest, new_upper]
            counts = COUNTS_T[cat]
            for d in range(NUM_DICE_SETS):
                out[d] = max(out[d], outcome[counts[d]])
        else:
            after = values[rest, upper]
            scores = SCORES_T[cat]
            for d in range(NUM_DICE_SETS):
                out[d] = max(out[d], scores[d] + after)


@njit(cache=True)
def keep_values_into(after, out):
    """``out[k]`` = expected ``after[final dice]`` when keeping multiset ``k`` (float64 [462]).

    ``after`` float64 [252]: the value of each final roll. Fills sizes 5 down to 0.
    """
    for k in range(NUM_KEPT - 1, FIRST_FIVE - 1, -1):
        out[k] = after[DICE_OF_KEPT[k]]
    for k in range(FIRST_FIVE - 1, -1, -1):
        acc = 0.0
        for f in range(6):
            acc += out[KEPT_ADD[k, f]]
        out[k] = acc / 6.0


@njit(cache=True)
def best_after_keep_into(mark, keep1, best_keep, out):
    """``out[d]`` = value of dice ``d`` with one reroll left: mark now or the best keep.

    ``best_keep`` float64 [463] scratch: best keep value over the sub-multisets of each multiset
    of size <= 4; its last slot is a NEG sentinel that absent faces point to (no branches).
    """
    best_keep[NUM_KEPT] = NEG
    for k in range(FIRST_FIVE):
        b = keep1[k]
        for f in range(6):
            b = max(b, best_keep[KEPT_SUB[k, f]])
        best_keep[k] = b
    for k in range(FIRST_FIVE, NUM_KEPT):
        b = mark[DICE_OF_KEPT[k]]
        for f in range(6):  # keep-all is illegal: only proper sub-multisets
            b = max(b, best_keep[KEPT_SUB[k, f]])
        out[DICE_OF_KEPT[k]] = b


@njit(cache=True)
def mark_value(values, avail, upper, dice, cat):
    """Value of marking ``cat`` with ``dice``: points (bonus included) + V of the next board."""
    points, new_upper = mark_points(avail, upper, dice, cat)
    return points + values[avail & ~(1 << (14 - cat)), new_upper]


@njit(cache=True)
def turn_tables_into(values, avail, upper, rerolls_left, mark, keep1, best1, keep2, scratch):
    """Fill the tables a decision with ``rerolls_left`` needs (all float64; see module doc).

    mark, best1: [252]; keep1, keep2: [462]; scratch: [463]. With 0 rerolls left nothing is needed.
    """
    if rerolls_left == 0:
        return
    mark_values_into(values, avail, upper, mark)
    keep_values_into(mark, keep1)
    if rerolls_left == 2:
        best_after_keep_into(mark, keep1, scratch, best1)
        keep_values_into(best1, keep2)


@njit(cache=True)
def action_values_into(values, avail, upper, dice, rerolls_left, keep_table, out):
    """Value of every action (float64 [47], NaN if illegal) given the filled turn tables.

    ``keep_table`` is ``keep1`` with one reroll left and ``keep2`` with two.
    """
    for a in range(NUM_ACTIONS):
        out[a] = np.nan
    if rerolls_left > 0:
        for mask in range(KEEP_ALL):
            out[mask] = keep_table[KEEP_TO_KEPT[dice, mask]]
    for cat in range(NUM_CATEGORIES):
        if (avail >> (14 - cat)) & 1:
            out[MARK_OFFSET + cat] = mark_value(values, avail, upper, dice, cat)


@njit(cache=True)
def choose(action_values):
    """The lowest action index whose value is within TIE_EPS of the best (NaN = illegal)."""
    best = NEG
    for a in range(NUM_ACTIONS):
        if action_values[a] > best:
            best = action_values[a]
    for a in range(NUM_ACTIONS):
        if action_values[a] >= best - TIE_EPS:
            return a
    return -1


@njit(cache=True)
def oracle_action_values(values, states, rows, out):
    """Action values (float64 [len(rows), 47]) for the player to move in ``states[rows]``.

    ``states`` int64 [G, STATE_LEN]; values are for the mover's own board (solitaire).
    """
    mark = np.empty(NUM_DICE_SETS)
    best1 = np.empty(NUM_DICE_SETS)
    keep1 = np.empty(NUM_KEPT)
    keep2 = np.empty(NUM_KEPT)
    scratch = np.empty(NUM_KEPT + 1)
    for j in range(rows.shape[0]):
        state = states[rows[j]]
        player = state[S_PLAYER]
        avail = state[S_AVAIL + player]
        upper = state[S_UPPER + player]
        rerolls = state[S_REROLLS]
        turn_tables_into(values, avail, upper, rerolls, mark, keep1, best1, keep2, scratch)
        keep_table = keep2 if rerolls == 2 else keep1
        action_values_into(values, avail, upper, state[S_DICE], rerolls, keep_table, out[j])


@njit(cache=True)
def oracle_actions(values, states, rows, out):
    """Oracle actions (int64 [len(rows)]) for ``states[rows]``; deterministic tie-breaking."""
    action_vals = np.empty((1, NUM_ACTIONS))
    one = np.zeros(1, dtype=np.int64)
    for j in range(rows.shape[0]):
        one[0] = rows[j]
        oracle_action_values(values, states, one, action_vals)
        out[j] = choose(action_vals[0])


@njit(cache=True, inline="always")
def _roll_from(kept, rng):
    """Roll the dice not in ``kept``; returns (dice idx, new rng counter)."""
    k = kept
    while KEPT_SIZE[k] < 5:
        rng = (rng + 0x9E3779B9) & 0xFFFFFFFF
        face = (mix32(rng) * 6) >> 32
        k = KEPT_ADD[k, face]
    return KEPT_TO_DICE[k], rng


@njit(cache=True)
def play_solitaire_game(values, seed, tables, action_vals):
    """One solitaire game played optimally; returns (score, upper bonus scored, yatzy scored).

    ``tables`` float64 [5, 463] scratch (mark, best1, keep1, keep2, best-keep scratch);
    ``action_vals`` float64 [47] scratch. Dice come from a counter generator seeded by ``seed``.
    """
    mark = tables[0, :NUM_DICE_SETS]
    best1 = tables[1, :NUM_DICE_SETS]
    keep1, keep2 = tables[2, :NUM_KEPT], tables[3, :NUM_KEPT]
    scratch = tables[4]
    rng = mix32(seed & 0xFFFFFFFF) ^ mix32((seed >> 32) & 0xFFFFFFFF)
    avail = (1 << NUM_CATEGORIES) - 1
    upper = 0
    score = 0
    bonus = False
    yatzy = False
    for _ in range(NUM_CATEGORIES):
        turn_tables_into(values, avail, upper, 2, mark, keep1, best1, keep2, scratch)
        dice, rng = _roll_from(0, rng)
        for rerolls in range(2, -1, -1):
            keep_table = keep2 if rerolls == 2 else keep1
            action_values_into(values, avail, upper, dice, rerolls, keep_table, action_vals)
            a = choose(action_vals)
            if a < MARK_OFFSET:
                dice, rng = _roll_from(KEEP_TO_KEPT[dice, a], rng)
                continue
            cat = a - MARK_OFFSET
            points, new_upper = mark_points(avail, upper, dice, cat)
            bonus = bonus or (upper < UPPER_BONUS_THRESHOLD <= new_upper and cat < 6)
            yatzy = yatzy or (cat == NUM_CATEGORIES - 1 and points > 0)
            score += points
            upper = new_upper
            avail &= ~(1 << (14 - cat))
            break
    return score, bonus, yatzy


@njit(cache=True, parallel=True)
def simulate_solitaire(values, seeds, scores, bonus, yatzy):
    """Play ``len(seeds)`` optimal solitaire games in parallel (numba threads).

    Fills ``scores`` int64 [N], ``bonus`` bool [N] (upper bonus scored), ``yatzy`` bool [N]
    (Yatzy scored). Game ``i`` depends only on ``seeds[i]``, not on the thread count.
    """
    n = seeds.shape[0]
    n_chunks = min(n, 64)
    for c in prange(n_chunks):
        tables = np.empty((5, NUM_KEPT + 1))
        action_vals = np.empty(NUM_ACTIONS)
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            s, b, y = play_solitaire_game(values, seeds[i], tables, action_vals)
            scores[i] = s
            bonus[i] = b
            yatzy[i] = y
