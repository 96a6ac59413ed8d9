"""Yatzy positions as compact rows for the inference server (protocol kind 4).

A position row is the first :data:`POSITION_WIDTH` fields of the match state row (``S_AVAIL`` ..
``S_PLAYER``: both boards, the dice, the rerolls left and the player to move) as int32 —
36 bytes where the schema-2 features of the same turn start are 676, and the schema-1 features
and legal bits of a PUCT leaf 382. Both searches send their leaves this way: the turn search its
successors (:func:`leaguezero.yatzy.search.turn_dp.successor_positions`), values only; PUCT its
leaves (the search's ``Batch.positions``), asking for logits too. The server encodes them with
the encoders the searches use in process (:func:`encode_turn_positions`; the PUCT features'
``encode_into`` and the policy's ``policy_mask``), so the features, the legal actions and the
value path's board runs are the in-process ones.

:func:`turn_position_codec` is what the server plugs into a schema-2 model and
:func:`pov_position_codec` into a schema-1 (PUCT) one; the range check runs on every request
first, so a hostile row cannot make an encoder read or write out of bounds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from leaguezero.az.inference.positions import PositionCodec
from leaguezero.yatzy.game.features import NUM_FEATURES, encode_into
from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    policy_mask,
)
from leaguezero.yatzy.game.tables import NUM_ACTIONS, NUM_DICE_SETS, UPPER_BONUS_THRESHOLD
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, encode_turn_into

POSITION_SCHEMA_ID = 1  # "yatzy_position_v1": state fields S_AVAIL .. S_PLAYER as int32
POSITION_WIDTH = S_PLAYER + 1  # 9
MAX_SCORE = 1023  # far above any reachable score (374 + 50); rows beyond it are refused

assert (S_AVAIL, S_UPPER, S_SCORE, S_DICE, S_REROLLS, S_PLAYER) == (0, 2, 4, 6, 7, 8)


@njit(cache=True, nogil=True)
def check_positions(positions):
    """Index of the first row of ``positions`` (int32 [N, 9]) outside the game's ranges, or -1."""
    for i in range(positions.shape[0]):
        row = positions[i]
        ok = row[S_PLAYER] == 0 or row[S_PLAYER] == 1
        for p in range(2):
            ok = ok and 0 <= row[S_AVAIL + p] < (1 << 15)
            ok = ok and 0 <= row[S_UPPER + p] <= UPPER_BONUS_THRESHOLD
            ok = ok and 0 <= row[S_SCORE + p] <= MAX_SCORE
        ok = ok and 0 <= row[S_DICE] < NUM_DICE_SETS and 0 <= row[S_REROLLS] <= 2
        if not ok:
            return i
    return -1


@njit(cache=True, nogil=True)
def encode_turn_positions(positions, out):
    """Schema-2 features (float32 [N, 169] into ``out``) of the turn starts ``positions``
    (int32 [N, 9], checked by :func:`check_positions`), each for its player to move."""
    for i in range(positions.shape[0]):
        row = positions[i]
        me = row[S_PLAYER]
        opp = 1 - me
        encode_turn_into(
            row[S_AVAIL + me], row[S_UPPER + me], row[S_SCORE + me],
            row[S_AVAIL + opp], row[S_UPPER + opp], row[S_SCORE + opp], me, out[i],
        )  # fmt: skip


@njit(cache=True, nogil=True)
def encode_pov_positions(positions, out):
    """Schema-1 features (float32 [N, 94] into ``out``) of ``positions`` (int32 [N, 9], checked
    by :func:`check_positions`), each from its player to move's side: PUCT's leaf encoder,
    which reads only these nine fields of a state row."""
    for i in range(positions.shape[0]):
        encode_into(positions[i], out[i])


@njit(cache=True, nogil=True)
def policy_masks(positions, out):
    """The policy's support (bool [N, 47] into ``out``) at each of ``positions``: PUCT's
    ``policy_mask``, which reads only these nine fields of a state row."""
    for i in range(positions.shape[0]):
        policy_mask(positions[i], out[i])


class _BufferedEncoder:
    """Encodes into a buffer grown to the largest call and reused (the server runs one forward
    pass at a time; a fresh array per batch would pay its page faults every time)."""

    def __init__(self, kernel, num_features: int) -> None:
        self._kernel = kernel
        self._out = np.zeros((0, num_features), np.float32)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        n = positions.shape[0]
        if self._out.shape[0] < n:
            width = self._out.shape[1]
            self._out = np.zeros((max(n, 2 * self._out.shape[0]), width), np.float32)
        out = self._out[:n]
        self._kernel(positions, out)
        return out


def _legal_actions(positions: np.ndarray) -> np.ndarray:
    out = np.empty((positions.shape[0], NUM_ACTIONS), np.bool_)
    policy_masks(positions, out)
    return out


def turn_position_codec() -> PositionCodec:
    """The codec of a schema-2 (turn-search) model: rows -> turn-start features, values only."""
    encoder = _BufferedEncoder(encode_turn_positions, NUM_TURN_FEATURES)
    return PositionCodec(POSITION_SCHEMA_ID, POSITION_WIDTH, check_positions, encoder)


def pov_position_codec() -> PositionCodec:
    """The codec of a schema-1 (PUCT) model: rows -> the mover's features and the policy's
    legal actions (logits or values)."""
    encoder = _BufferedEncoder(encode_pov_positions, NUM_FEATURES)
    return PositionCodec(
        POSITION_SCHEMA_ID, POSITION_WIDTH, check_positions, encoder, _legal_actions
    )
