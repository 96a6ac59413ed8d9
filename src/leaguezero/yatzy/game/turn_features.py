"""Feature schema 2: a turn-start position (no dice yet) from the point of view of the roller.

The turn search (:mod:`leaguezero.yatzy.search.turn`) values the positions between turns: the
player to move has not rolled, so the dice, the rerolls and the points the dice would score
(schema 1's offsets 37..90) do not exist. What decides such a position is the two boards and
the score difference; the upper total gets a one-hot (the 63-point bonus makes the value jump
at thresholds that a single scaled number hides). Layout (``F = 169``), ``me`` = the player about
to roll, ``opp`` = the other:

====== ===== ============================================================================
offset  size  content
====== ===== ============================================================================
0       15    me: category open (1) or filled (0), categories 0..14
15      15    opp: category open
30      64    me: upper_total one-hot (0..63; 63 = bonus earned)
94      64    opp: upper_total one-hot
158     1     me: total score / 375
159     1     opp: total score / 375
160     3     tanh((me score - opp score) / s) for s = 15, 50, 150
163     1     me: categories filled / 15
164     1     opp: categories filled / 15
165     1     1 if me is the second seat (player 1), else 0
166     1     me: upper bonus still reachable (earned, or 5 of every open upper face would reach it)
167     1     opp: upper bonus still reachable
168     1     1 (bias input: lets a zero board still produce a non-zero first layer)
====== ===== ============================================================================

Swapping the roles gives the position the other player would see at their turn start; the
turn search encodes every successor of a turn that way (the opponent is the one to roll).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from leaguezero.yatzy.game.rules import S_AVAIL, S_PLAYER, S_SCORE, S_UPPER, popcount15
from leaguezero.yatzy.game.tables import NUM_CATEGORIES, UPPER_BONUS_THRESHOLD

TURN_FEATURE_SCHEMA_ID = 2
TURN_FEATURE_SCHEMA_NAME = "yatzy_turnstart_v1"
NUM_TURN_FEATURES = 169

OFF_ME_OPEN = 0
OFF_OPP_OPEN = 15
OFF_ME_UPPER = 30
OFF_OPP_UPPER = 94
OFF_SCORE = 158
OFF_DIFF = 160
OFF_FILLED = 163
OFF_SEAT = 165
OFF_REACHABLE = 166
OFF_BIAS = 168

# Each board's columns and the shared ones (the board-tower net reads each board with one tower).
ME_BOARD_COLS = (*range(0, 15), *range(30, 94), 166)  # open boxes, upper one-hot, bonus reachable
OPP_BOARD_COLS = (*range(15, 30), *range(94, 158), 167)
SHARED_COLS = (158, 159, 160, 161, 162, 163, 164, 165, 168)  # scores, differences, filled, seat, 1


@njit(cache=True, inline="always")
def _bonus_reachable(avail, upper):
    """1.0 if the upper bonus is earned or five of each open upper face would still earn it."""
    if upper >= UPPER_BONUS_THRESHOLD:
        return 1.0
    most = 0
    for cat in range(6):
        if (avail >> (14 - cat)) & 1:
            most += 5 * (cat + 1)
    return 1.0 if upper + most >= UPPER_BONUS_THRESHOLD else 0.0


@njit(cache=True)
def encode_turn_into(
    my_avail, my_upper, my_score, opp_avail, opp_upper, opp_score, my_seat, out
):  # fmt: skip
    """Write the schema-2 features of a turn start into ``out`` (float32 [169])."""
    for i in range(NUM_TURN_FEATURES):
        out[i] = 0.0
    for cat in range(NUM_CATEGORIES):
        out[OFF_ME_OPEN + cat] = (my_avail >> (14 - cat)) & 1
        out[OFF_OPP_OPEN + cat] = (opp_avail >> (14 - cat)) & 1
    out[OFF_ME_UPPER + my_upper] = 1.0
    out[OFF_OPP_UPPER + opp_upper] = 1.0
    out[OFF_SCORE] = my_score / 375.0
    out[OFF_SCORE + 1] = opp_score / 375.0
    diff = float(my_score - opp_score)
    out[OFF_DIFF] = math.tanh(diff / 15.0)
    out[OFF_DIFF + 1] = math.tanh(diff / 50.0)
    out[OFF_DIFF + 2] = math.tanh(diff / 150.0)
    out[OFF_FILLED] = (NUM_CATEGORIES - popcount15(my_avail)) / 15.0
    out[OFF_FILLED + 1] = (NUM_CATEGORIES - popcount15(opp_avail)) / 15.0
    out[OFF_SEAT] = float(my_seat)
    out[OFF_REACHABLE] = _bonus_reachable(my_avail, my_upper)
    out[OFF_REACHABLE + 1] = _bonus_reachable(opp_avail, opp_upper)
    out[OFF_BIAS] = 1.0


@njit(cache=True)
def encode_turn_state_into(state, out):
    """Schema-2 features of ``state`` (int64 [16]) for its player to move, ignoring the dice."""
    me = state[S_PLAYER]
    opp = 1 - me
    encode_turn_into(
        state[S_AVAIL + me], state[S_UPPER + me], state[S_SCORE + me],
        state[S_AVAIL + opp], state[S_UPPER + opp], state[S_SCORE + opp], me, out,
    )  # fmt: skip


def encode_turn(state: np.ndarray) -> np.ndarray:
    """Schema-2 features of one state as a new float32 [169] array (not for hot loops)."""
    out = np.zeros(NUM_TURN_FEATURES, dtype=np.float32)
    encode_turn_state_into(np.ascontiguousarray(state, dtype=np.int64), out)
    return out
