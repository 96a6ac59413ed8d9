"""The oracle agent against the solver's best options, in matches, and in solitaire."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.agents.match import play_match
from leaguezero.yatzy.agents.oracle import OracleAgent, simulate
from leaguezero.yatzy.agents.registry import make_agent
from leaguezero.yatzy.game.rules import (
    DICE_RNG,
    S_REROLLS,
    STATE_LEN,
    apply_actions_batch,
    new_matches,
    terminal_mask,
)
from leaguezero.yatzy.oracle.solver import EXPECTED_START_VALUE, TIE_EPS, Oracle, load_oracle


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return load_oracle()


def reachable_states(agent: OracleAgent, games: int, seed: int) -> np.ndarray:
    """States (int64 [N, STATE_LEN]) met in 2-player games; 30% random moves vary the boards."""
    rng = np.random.default_rng(seed)
    rand = RandomAgent(seed=seed)
    states = np.zeros((games, STATE_LEN), dtype=np.int64)
    new_matches(states, rng.integers(0, 2**62, size=games), DICE_RNG)
    seen, done = [], np.zeros(games, dtype=np.bool_)
    while terminal_mask(states, done) < games:
        rows = np.flatnonzero(~done).astype(np.int64)
        seen.append(states[rows].copy())
        explore = rng.random(len(rows)) < 0.3
        actions = np.where(explore, rand.act(states, rows), agent.act(states, rows))
        apply_actions_batch(states, rows, actions)
    return np.concatenate(seen)


def test_agent_agrees_with_solver_best_options_on_10k_reachable_states(oracle: Oracle) -> None:
    agent = OracleAgent(oracle=oracle)
    states = reachable_states(agent, games=130, seed=11)
    stages = np.bincount(states[:, S_REROLLS], minlength=3)
    assert len(states) >= 10_000 and stages.min() >= 3000, stages
    actions = agent.act(states, np.arange(len(states)))
    solver_values = oracle.option_values(states)  # the solver's batch API, [N, 47]
    best = np.nanmax(solver_values, axis=1)
    chosen = solver_values[np.arange(len(states)), actions]
    agree = chosen >= best - TIE_EPS  # ties allowed: any of the solver's best options
    assert agree.all(), np.flatnonzero(~agree)[:10]


def test_agent_is_deterministic_and_ignores_the_other_rows(oracle: Oracle) -> None:
    agent = make_agent("oracle")
    assert agent.name == "oracle" and agent.deterministic
    states = reachable_states(OracleAgent(oracle=oracle), games=4, seed=3)
    rows = np.arange(len(states))
    first = agent.act(states, rows)
    assert np.array_equal(first, agent.act(states, rows))
    assert np.array_equal(first[::-1], agent.act(states, rows[::-1]))


def test_oracle_self_match_is_exactly_half_and_beats_greedy(oracle: Oracle) -> None:
    agent = OracleAgent(oracle=oracle)
    self_match = play_match(agent, OracleAgent(oracle=oracle), games=40, seed=5).summary
    assert self_match.a_win_rate == 0.5 and self_match.score_diff_mean == 0.0
    vs_greedy = play_match(agent, GreedyAgent(), games=200, seed=6).summary
    assert vs_greedy.a_win_rate > 0.7, vs_greedy
    assert vs_greedy.score_diff_mean > 5 * vs_greedy.score_diff_se


def test_simulated_mean_is_within_3_se_of_the_expected_score(oracle: Oracle) -> None:
    stats = simulate(oracle, games=20_000, seed=2024)
    assert abs(stats.mean - EXPECTED_START_VALUE) < 3 * stats.se, stats.to_dict()
    assert 0.86 < stats.bonus_rate < 0.92
    assert 0.30 < stats.yatzy_rate < 0.45
    again = simulate(oracle, games=500, seed=7)
    assert np.array_equal(again.scores, simulate(oracle, games=500, seed=7).scores)
    assert not np.array_equal(again.scores, simulate(oracle, games=500, seed=8).scores)
