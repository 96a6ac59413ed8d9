"""Pipelined lockstep search (two groups of games, one at the evaluator): same trees as plain."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, new_matches
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.search.puct import make_search
from leaguezero.yatzy.search.settings import SearchSettings


class RowwiseEvaluator:
    """Deterministic per row (elementwise maths only, so batch composition cannot matter)."""

    feature_schema_id = FEATURE_SCHEMA_ID
    num_actions = NUM_ACTIONS

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        self.weights = rng.uniform(-1, 1, NUM_FEATURES).astype(np.float32)
        self.calls = 0

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        scores = 1.0 + np.abs(np.sin(np.arange(NUM_ACTIONS) + features[:, :1] * 13.0))
        priors = np.where(legal, scores, 0.0)
        priors /= priors.sum(axis=1, keepdims=True)
        values = np.tanh((features * self.weights).sum(axis=1) / 10.0)
        return priors.astype(np.float32), values.astype(np.float32)


class AsyncEvaluator(RowwiseEvaluator):
    """The same evaluator with the inference client's ``evaluate_async`` shape."""

    def __init__(self) -> None:
        super().__init__()
        self.async_calls = 0

    def evaluate_async(self, features: np.ndarray, legal: np.ndarray):
        self.async_calls += 1
        result = self.evaluate(features.copy(), legal.copy())  # the client copies on submit

        class Done:
            def result(self):
                return result

        return Done()


@pytest.mark.parametrize("inflight", [1, 4])
def test_pipelined_search_builds_the_same_trees(inflight):
    games = 9  # odd: the two groups differ in size
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + 3, DICE_RNG)
    seeds = np.arange(games, dtype=np.int64) * 11
    mcts = SearchSettings(budget_reroll=24, budget_mark=16, max_inflight_per_game=inflight)
    plain = make_search(RowwiseEvaluator(), mcts, max_games=games)
    piped_evaluator = AsyncEvaluator()
    piped = make_search(piped_evaluator, mcts, max_games=games)
    a = plain.run(states, seeds)
    b = piped.run(states, seeds)
    assert piped_evaluator.async_calls > 0
    np.testing.assert_array_equal(a.pi, b.pi)
    np.testing.assert_array_equal(a.root_value, b.root_value)
    np.testing.assert_array_equal(a.counters, b.counters)
    for name in ("edge_visits", "edge_value_sum", "node_key", "edge_child"):
        np.testing.assert_array_equal(getattr(plain.tree, name), getattr(piped.tree, name))
