"""The raw policy as an agent (``sims=0`` for a PUCT network): no search."""

from __future__ import annotations

import numpy as np

from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.features import encode_batch
from leaguezero.yatzy.game.rules import policy_mask_batch
from leaguezero.yatzy.game.tables import NUM_ACTIONS


class PolicyAgent:
    """Plays the most probable legal action of the network's policy (no search)."""

    deterministic = True

    def __init__(self, evaluator: TorchEvaluator, name: str) -> None:
        self.evaluator = evaluator
        self.name = name

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        feats = np.zeros((len(rows), self.evaluator.num_features), np.float32)
        legal = np.zeros((len(rows), NUM_ACTIONS), np.bool_)
        encode_batch(states, rows, feats)
        policy_mask_batch(states, rows, legal)
        priors, _ = self.evaluator.evaluate(feats, legal)
        return np.argmax(np.where(legal, priors, -1.0), axis=1).astype(np.int64)
