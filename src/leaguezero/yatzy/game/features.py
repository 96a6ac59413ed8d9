"""Feature schema v1: a float32 vector from the point of view of the player to move.

``FEATURE_SCHEMA_ID`` travels in every replay shard, checkpoint and inference request; readers
reject a mismatch. Layout (``F = 94``), ``me`` = player to move, ``opp`` = the other:

====== ===== ============================================================================
offset  size  content
====== ===== ============================================================================
0       15    me: category open (1) or filled (0), categories 0..14
15      15    opp: category open
30      1     me: upper_total / 63
31      1     opp: upper_total / 63
32      1     me: upper bonus earned (upper_total == 63)
33      1     opp: upper bonus earned
34      1     me: total score / 375
35      1     opp: total score / 375
36      1     tanh((me score - opp score) / 50)
37      36    dice: one-hot count for each face, ``37 + 6 * (face - 1) + count``
73      3     rerolls_left one-hot (0, 1, 2)
76      15    points for marking each category now / 50 (0 when filled; bonus excluded)
91      1     me: categories filled / 15
92      1     opp: categories filled / 15
93      1     1 if me is the second seat (player 1), else 0
====== ===== ============================================================================

Swapping the players' boards and ``player_to_move`` gives the same vector (tested), so one
network serves both seats.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    popcount15,
)
from leaguezero.yatzy.game.tables import COUNTS, NUM_CATEGORIES, SCORES

FEATURE_SCHEMA_ID = 1
FEATURE_SCHEMA_NAME = "yatzy_pov_v1"
NUM_FEATURES = 94

OFF_ME_OPEN = 0
OFF_OPP_OPEN = 15
OFF_UPPER = 30
OFF_BONUS = 32
OFF_SCORE = 34
OFF_DIFF = 36
OFF_DICE = 37
OFF_REROLLS = 73
OFF_POINTS = 76
OFF_FILLED = 91
OFF_SEAT = 93


@njit(cache=True)
def encode_into(state, out):
    """Write the v1 features of ``state`` (int64 [16]) into ``out`` (float32 [94])."""
    me = state[S_PLAYER]
    opp = 1 - me
    my_avail = state[S_AVAIL + me]
    opp_avail = state[S_AVAIL + opp]
    for cat in range(NUM_CATEGORIES):
        out[OFF_ME_OPEN + cat] = (my_avail >> (14 - cat)) & 1
        out[OFF_OPP_OPEN + cat] = (opp_avail >> (14 - cat)) & 1
    out[OFF_UPPER] = state[S_UPPER + me] / 63.0
    out[OFF_UPPER + 1] = state[S_UPPER + opp] / 63.0
    out[OFF_BONUS] = 1.0 if state[S_UPPER + me] >= 63 else 0.0
    out[OFF_BONUS + 1] = 1.0 if state[S_UPPER + opp] >= 63 else 0.0
    out[OFF_SCORE] = state[S_SCORE + me] / 375.0
    out[OFF_SCORE + 1] = state[S_SCORE + opp] / 375.0
    out[OFF_DIFF] = math.tanh((state[S_SCORE + me] - state[S_SCORE + opp]) / 50.0)
    for i in range(36):
        out[OFF_DICE + i] = 0.0
    dice = state[S_DICE]
    for f in range(6):
        out[OFF_DICE + 6 * f + COUNTS[dice, f]] = 1.0
    for r in range(3):
        out[OFF_REROLLS + r] = 1.0 if state[S_REROLLS] == r else 0.0
    for cat in range(NUM_CATEGORIES):
        is_open = (my_avail >> (14 - cat)) & 1
        out[OFF_POINTS + cat] = SCORES[dice, cat] / 50.0 if is_open else 0.0
    out[OFF_FILLED] = (NUM_CATEGORIES - popcount15(my_avail)) / 15.0
    out[OFF_FILLED + 1] = (NUM_CATEGORIES - popcount15(opp_avail)) / 15.0
    out[OFF_SEAT] = float(me)


@njit(cache=True)
def encode_batch(states, rows, out):
    """Encode ``states[rows[j]]`` into ``out[j]``; states int64 [G, 16], out float32 [n, 94]."""
    for j in range(rows.shape[0]):
        encode_into(states[rows[j]], out[j])


def encode(state: np.ndarray) -> np.ndarray:
    """Features of one state as a new float32 [94] array (convenience; not for hot loops)."""
    out = np.zeros(NUM_FEATURES, dtype=np.float32)
    encode_into(state, out)
    return out
