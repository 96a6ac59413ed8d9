"""Heuristic evaluators for search tests and benchmarks (no network needed).

* :class:`OracleValueEvaluator`: values and priors from the exact solitaire oracle
  (:mod:`leaguezero.yatzy.oracle.solver`).
  The value of a position is the difference of the two players'
  expected final scores under optimal solitaire play, divided by ``value_scale``: the mover's
  score so far plus the best action's expected remaining score, minus the opponent's score so far
  plus the turn-start value of the opponent's board. It is linear in expectations, so a search
  that averages these values over sampled dice estimates exactly the oracle's action values
  (plus the opponent's expected score, the same for every action of the mover): with enough
  simulations its best move is the oracle's.
* :class:`PointsEvaluator`: a cheap deterministic stub (priors from the points each mark scores
  now, value from the score difference and the best mark available now); every row depends
  only on its own features, so the search kernels and the reference can be compared row for
  row, and goldens stay stable.

Both read the positions back from the v1 features (the Evaluator protocol passes features, not
states): boards, scores, dice and rerolls are recoverable exactly from schema 1.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from leaguezero.az.evaluator import masked_softmax
from leaguezero.yatzy.game.features import (
    FEATURE_SCHEMA_ID,
    NUM_FEATURES,
    OFF_DICE,
    OFF_DIFF,
    OFF_ME_OPEN,
    OFF_OPP_OPEN,
    OFF_POINTS,
    OFF_REROLLS,
    OFF_SCORE,
    OFF_UPPER,
)
from leaguezero.yatzy.game.rules import (
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    STATE_LEN,
)
from leaguezero.yatzy.game.tables import (
    COUNTS,
    MARK_OFFSET,
    NUM_ACTIONS,
    NUM_CATEGORIES,
    NUM_KEEP_MASKS,
)

_COUNTS_KEY = {tuple(int(c) for c in row): i for i, row in enumerate(COUNTS)}
_CAT_BITS = 1 << (NUM_CATEGORIES - 1 - np.arange(NUM_CATEGORIES))  # [15] avail bit per category


def decode_features(features: np.ndarray) -> np.ndarray:
    """Rebuild mover-first states (int64 [N, 16], player 0 = the mover) from v1 features [N, 94].

    Fills avail, upper, score, dice and rerolls; seeds, marks and the generator are left 0.
    """
    n = features.shape[0]
    states = np.zeros((n, STATE_LEN), np.int64)
    for side, off in ((0, OFF_ME_OPEN), (1, OFF_OPP_OPEN)):
        open_cats = features[:, off : off + NUM_CATEGORIES] > 0.5
        states[:, S_AVAIL + side] = (open_cats * _CAT_BITS).sum(axis=1)
        states[:, S_UPPER + side] = np.rint(features[:, OFF_UPPER + side] * 63.0)
        states[:, S_SCORE + side] = np.rint(features[:, OFF_SCORE + side] * 375.0)
    dice_onehot = features[:, OFF_DICE : OFF_DICE + 36].reshape(n, 6, 6)
    counts = dice_onehot.argmax(axis=2)  # [N, 6] count of each face
    states[:, S_DICE] = [_COUNTS_KEY[tuple(row)] for row in counts.tolist()]
    states[:, S_REROLLS] = features[:, OFF_REROLLS : OFF_REROLLS + 3].argmax(axis=1)
    return states


class OracleValueEvaluator:
    """Priors and values from the exact solitaire oracle (see the module docstring).

    Args:
        oracle: a loaded :class:`leaguezero.yatzy.oracle.solver.Oracle` (``load_oracle()``).
        value_scale: points per unit of value (400 keeps every value inside [-1, 1]).
        priors: ``"softmax"``: softmax of the oracle's action values / ``prior_temperature``
            (points); ``"uniform"``: uniform over legal actions (search must find the move).
        prior_temperature: softness of the softmax priors, in points.
    """

    feature_schema_id = FEATURE_SCHEMA_ID
    num_features = NUM_FEATURES
    num_actions = NUM_ACTIONS

    def __init__(
        self,
        oracle,
        value_scale: float = 400.0,
        priors: Literal["softmax", "uniform"] = "softmax",
        prior_temperature: float = 2.0,
    ) -> None:
        if priors not in ("softmax", "uniform"):
            raise ValueError(f"priors must be 'softmax' or 'uniform', got {priors!r}")
        self.oracle = oracle
        self.value_scale = value_scale
        self.priors = priors
        self.prior_temperature = prior_temperature

    def action_values(self, states: np.ndarray) -> np.ndarray:
        """The mover's expected final score after each action: float64 [N, 47], NaN if illegal."""
        option = self.oracle.option_values(states)
        mover = states[:, S_PLAYER]
        return option + states[np.arange(len(states)), S_SCORE + mover][:, None]

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        states = decode_features(features)
        values = self.action_values(states)  # [N, 47]
        values = np.where(legal, values, np.nan)
        mover = np.nanmax(values, axis=1)
        opp_avail, opp_upper = states[:, S_AVAIL + 1], states[:, S_UPPER + 1]
        opp_future = np.where(opp_avail > 0, self.oracle.values[opp_avail, opp_upper], 0.0)
        opp = states[:, S_SCORE + 1] + opp_future
        value = ((mover - opp) / self.value_scale).astype(np.float32)
        if self.priors == "uniform":
            logits = np.zeros(legal.shape, np.float64)
        else:
            logits = np.nan_to_num((values - mover[:, None]) / self.prior_temperature, nan=0.0)
        return masked_softmax(logits, legal), value


# Keep masks: a mild preference for keeping more dice, so keeps are not all tied in the stub.
_KEEP_LOGITS = np.array([bin(m).count("1") * 0.1 for m in range(NUM_KEEP_MASKS)], np.float32)


class PointsEvaluator:
    """Deterministic stub: marks scored by their points now, value from the lead and dice."""

    feature_schema_id = FEATURE_SCHEMA_ID
    num_features = NUM_FEATURES
    num_actions = NUM_ACTIONS

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.zeros(legal.shape, np.float32)
        logits[:, :NUM_KEEP_MASKS] = _KEEP_LOGITS
        logits[:, MARK_OFFSET:] = 3.0 * features[:, OFF_POINTS : OFF_POINTS + NUM_CATEGORIES]
        points = features[:, OFF_POINTS : OFF_POINTS + NUM_CATEGORIES]
        # The lead, plus the best mark available now: keeps are not all worth less than marks.
        value = np.tanh(2.0 * features[:, OFF_DIFF] + points.max(axis=1)).astype(np.float32)
        return masked_softmax(logits, legal), value
