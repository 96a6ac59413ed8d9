"""Yatzy PUCT search: numba kernels vs the object-per-node reference, and search behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.az.reference_puct import ReferencePUCT
from leaguezero.az.tree import C_COLLISIONS, C_FALLBACKS, ROOT_INDEX
from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    STATE_LEN,
    apply_action,
    is_terminal,
    legal_mask,
    new_matches,
    policy_mask,
)
from leaguezero.yatzy.oracle.evaluator import PointsEvaluator, decode_features
from leaguezero.yatzy.search.puct import YatzyReferenceGame, make_search, state_seeds
from leaguezero.yatzy.search.settings import SearchSettings

A = 47


def random_states(n: int, seed: int, min_steps: int = 0, max_steps: int = 85) -> np.ndarray:
    """``n`` non-terminal match states reached by random play (int64 [n, 16])."""
    rng = np.random.default_rng(seed)
    states = np.zeros((n, STATE_LEN), np.int64)
    new_matches(states, rng.integers(0, 2**40, n), DICE_KEYED)
    legal = np.zeros(A, np.bool_)
    for g in range(n):
        for _ in range(int(rng.integers(min_steps, max_steps + 1))):
            before = states[g].copy()
            legal_mask(states[g], legal)
            apply_action(states[g], int(rng.choice(np.flatnonzero(legal))))
            if is_terminal(states[g]):
                states[g] = before
                break
    return states


@pytest.mark.parametrize(
    ("max_inflight", "virtual_loss", "terminal_scale", "margin_utility", "normalize_q"),
    [
        (1, 1.0, 0.0, 0.0, True),
        (1, 1.0, 0.0, 0.0, False),
        (3, 1.0, 0.0, 1.0, True),
        (3, 0.0, 50.0, 0.0, False),
        (4, 0.5, 0.0, 0.5, True),
    ],
)
def test_kernels_match_object_reference(
    max_inflight, virtual_loss, terminal_scale, margin_utility, normalize_q
):
    # Random states from early to the last few marks, so terminal nodes and collisions occur.
    states = np.concatenate([random_states(5, 1), random_states(3, 2, min_steps=78)])
    seeds = np.arange(100, 100 + len(states), dtype=np.int64)
    mcts = SearchSettings(
        budget_reroll=40, budget_mark=24, max_inflight_per_game=max_inflight,
        virtual_loss=virtual_loss, c_puct=1.25, margin_utility=margin_utility,
        normalize_q=normalize_q,
    )  # fmt: skip
    search = make_search(
        PointsEvaluator(), mcts, max_games=len(states), terminal_scale=terminal_scale
    )
    result = search.run(states, seeds)
    reference = ReferencePUCT(
        YatzyReferenceGame(terminal_scale, margin_utility), PointsEvaluator(), c_puct=1.25,
        max_inflight=max_inflight, virtual_loss=virtual_loss, normalize_q=normalize_q,
    )  # fmt: skip
    for g, state in enumerate(states):
        budget = 40 if state[S_REROLLS] > 0 else 24
        ref = reference.search(state, int(seeds[g]), budget)
        np.testing.assert_array_equal(search.tree.edge_visits[g, ROOT_INDEX], ref.visits)
        assert result.root_value[g] == pytest.approx(ref.root_value, abs=1e-6)
        assert result.counters[g, C_COLLISIONS] == ref.collisions
        np.testing.assert_allclose(result.pi[g], ref.visits / ref.visits.sum(), atol=1e-7)
    assert result.stats["sims"] == sum(40 if s[S_REROLLS] > 0 else 24 for s in states)


def test_decode_features_round_trip():
    from leaguezero.yatzy.game.features import encode

    states = random_states(40, 3)
    features = np.stack([encode(s) for s in states])
    decoded = decode_features(features)
    mover = states[:, S_PLAYER]
    rows = np.arange(len(states))
    for off in (S_AVAIL, S_UPPER, S_SCORE):
        np.testing.assert_array_equal(decoded[:, off], states[rows, off + mover])
        np.testing.assert_array_equal(decoded[:, off + 1], states[rows, off + 1 - mover])
    np.testing.assert_array_equal(decoded[:, S_DICE], states[:, S_DICE])
    np.testing.assert_array_equal(decoded[:, S_REROLLS], states[:, S_REROLLS])


class BrokenEvaluator:
    """NaN priors on even rows, all-zero priors on odd rows, NaN values on every third."""

    feature_schema_id, num_features, num_actions = 1, 94, A

    def evaluate(self, features, legal):
        n = len(features)
        priors = np.zeros((n, A), np.float32)
        priors[::2] = np.nan
        values = np.zeros(n, np.float32)
        values[::3] = np.nan
        return priors, values


def test_degenerate_priors_fall_back_to_uniform_and_are_counted():
    states = random_states(4, 4)
    search = make_search(
        BrokenEvaluator(), SearchSettings(budget_reroll=8, budget_mark=8), max_games=4
    )
    result = search.run(states, np.arange(4, dtype=np.int64))
    assert result.stats["fallbacks"] == result.stats["evals"]
    assert (result.counters[:, C_FALLBACKS] == 9).all()  # root + 8 simulations
    legal = np.zeros((4, A), np.bool_)
    for g in range(4):
        policy_mask(states[g], legal[g])  # uniform over the policy's support
    np.testing.assert_allclose(result.raw_priors, legal / legal.sum(1, keepdims=True), rtol=1e-6)
    assert np.isfinite(result.pi).all() and np.isfinite(result.root_value).all()


def test_root_noise_only_when_asked_and_targets_are_visit_counts():
    states = random_states(6, 5)
    seeds = np.arange(6, dtype=np.int64)
    mcts = SearchSettings(budget_reroll=32, budget_mark=32, dirichlet_epsilon=0.25)
    plain = make_search(PointsEvaluator(), mcts, max_games=6, seed=1).run(states, seeds)
    np.testing.assert_array_equal(plain.raw_priors, plain.noisy_priors)
    noisy = make_search(PointsEvaluator(), mcts, max_games=6, seed=1).run(
        states, seeds, add_noise=True, temperature=1.0
    )
    np.testing.assert_array_equal(noisy.raw_priors, plain.raw_priors)
    assert not np.allclose(noisy.noisy_priors, noisy.raw_priors)
    legal = noisy.raw_priors > 0
    assert (noisy.noisy_priors[~legal] == 0).all()
    np.testing.assert_allclose(noisy.noisy_priors.sum(axis=1), 1.0, atol=1e-5)
    # The target is the normalised visit count whatever the temperature; sampled moves are visited.
    np.testing.assert_allclose(noisy.pi.sum(axis=1), 1.0, atol=1e-6)
    assert (noisy.pi[np.arange(6), noisy.actions] > 0).all()
    np.testing.assert_array_equal(plain.actions, np.argmax(plain.pi, axis=1))


def test_last_decision_of_the_match_is_valued_by_the_real_outcome():
    # Play random games to the final decision (one open category, no rerolls left).
    states = random_states(30, 6, min_steps=88, max_steps=200)
    last = [
        s for s in states if s[S_REROLLS] == 0 and s[S_AVAIL + 1 - s[S_PLAYER]] == 0
        and bin(int(s[S_AVAIL + s[S_PLAYER]])).count("1") == 1
    ]  # fmt: skip
    assert last, "random play should reach a final decision"
    roots = np.stack(last)
    mcts = SearchSettings(budget_mark=10, margin_utility=0.0)  # pure win/draw/loss values
    result = make_search(PointsEvaluator(), mcts, max_games=len(roots)).run(
        roots, np.zeros(len(roots), np.int64)
    )
    for g, s in enumerate(roots):
        after = s.copy()
        apply_action(after, int(result.actions[g]))
        me = s[S_PLAYER]
        diff = after[S_SCORE + me] - after[S_SCORE + 1 - me]
        # Root value averages the root's own evaluation (1 visit) with 10 exact outcomes.
        expected_sum = float(np.sign(diff)) * 10
        root_eval = result.root_value[g] * 11 - expected_sum
        assert abs(root_eval) <= 1.0 + 1e-5
    assert result.stats["terminal_sims"] == 10 * len(roots)
    assert result.stats["evals"] == len(roots)  # only the roots reach the evaluator


def test_virtual_loss_reduces_collisions():
    states = random_states(16, 7, max_steps=40)
    seeds = np.arange(16, dtype=np.int64)
    collisions = {}
    for vl in (0.0, 1.0):
        mcts = SearchSettings(
            budget_reroll=48, budget_mark=48, max_inflight_per_game=8, virtual_loss=vl
        )
        result = make_search(PointsEvaluator(), mcts, max_games=16).run(states, seeds)
        collisions[vl] = result.stats["collisions"]
        assert result.stats["sims"] == 48 * 16
    assert collisions[1.0] < collisions[0.0]


def test_state_seeds_depend_on_the_whole_state():
    states = random_states(8, 8)
    a = np.zeros(8, np.int64)
    b = np.zeros(8, np.int64)
    state_seeds(states, 0, a)
    state_seeds(states.copy(), 0, b)
    np.testing.assert_array_equal(a, b)
    changed = states.copy()
    changed[:, 9] += 1  # the episode seed alone
    state_seeds(changed, 0, b)
    assert (a != b).all()


def test_search_agent_is_deterministic_in_a_match():
    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.search.puct import SearchAgent

    mcts = SearchSettings(budget_reroll=6, budget_mark=4)
    a = SearchAgent(PointsEvaluator(), mcts, name="a")
    b = SearchAgent(PointsEvaluator(), mcts, name="b")
    result = play_match(a, b, games=4, seed=3)
    assert result.summary.a_win_rate == 0.5
    np.testing.assert_array_equal(result.a_scores, result.b_scores[:, ::-1])


def test_margin_utility_values_finished_matches_by_outcome_and_score():
    from leaguezero.yatzy.search.puct import terminal_value

    state = np.zeros(STATE_LEN, np.int64)
    state[S_SCORE], state[S_SCORE + 1] = 200, 150
    assert terminal_value(state, 0, 0.0, 0.0, 50.0) == 1.0
    w = 1.0
    expected = (1.0 + w * np.tanh(50 / 50.0)) / (1 + w)
    assert terminal_value(state, 0, 0.0, w, 50.0) == pytest.approx(expected)
    assert terminal_value(state, 1, 0.0, w, 50.0) == pytest.approx(-expected)
