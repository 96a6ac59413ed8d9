from __future__ import annotations

import numpy as np

from leaguezero.yatzy.agents import bots
from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.agents.registry import make_agent
from leaguezero.yatzy.game import rules, tables
from leaguezero.yatzy.game.rules import S_AVAIL, S_DICE, S_REROLLS, STATE_LEN


def _play(agent, games=20):
    states = np.zeros((games, STATE_LEN), np.int64)
    rules.new_matches(states, np.arange(games, dtype=np.int64), rules.DICE_KEYED)
    legal = np.zeros(47, np.bool_)
    while True:
        rows = np.array([g for g in range(games) if not rules.is_terminal(states[g])], np.int64)
        if rows.size == 0:
            return states
        actions = agent.act(states, rows)
        for r, a in zip(rows, actions, strict=True):
            rules.legal_mask(states[r], legal)
            assert legal[a], (states[r], a)
        rules.apply_actions_batch(states, rows, actions)


def test_bots_only_play_legal_actions():
    _play(GreedyAgent())
    _play(RandomAgent(seed=3))


def test_greedy_marks_yatzy_at_once_and_scratches_cheaply():
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, 0, rules.DICE_KEYED)
    state[S_DICE] = tables.dice_index([4, 4, 4, 4, 4])
    assert bots.greedy_action(state) == 32 + 14
    state[S_DICE] = tables.dice_index([1, 1, 3, 5, 6])
    state[S_REROLLS] = 0
    state[S_AVAIL] = tables.avail_bit(14) | tables.avail_bit(10)  # only yatzy, small straight
    assert bots.greedy_action(state) == 32 + 14  # both score 0: yatzy comes first to scratch


def test_greedy_keeps_the_most_frequent_face():
    state = np.zeros(STATE_LEN, np.int64)
    rules.new_match(state, 0, rules.DICE_KEYED)
    state[S_DICE] = tables.dice_index([2, 3, 5, 5, 6])
    assert bots.greedy_action(state) == 0b00110  # keep the two fives


def test_random_agent_covers_all_legal_actions():
    states = np.zeros((1, STATE_LEN), np.int64)
    rules.new_match(states[0], 1, rules.DICE_KEYED)
    agent = RandomAgent(seed=5)
    seen = {int(agent.act(states, np.array([0]))[0]) for _ in range(3000)}
    assert seen == set(range(31)) | set(range(32, 47))


def test_make_agent_rejects_unknown_names():
    import pytest

    from leaguezero.yatzy.agents.registry import AgentSpecError

    with pytest.raises(AgentSpecError, match="random, greedy"):
        make_agent("grumpy")


def test_numba_random_playouts_match_the_reference_distribution():
    import random

    from leaguezero.yatzy.game import reference

    scores = np.zeros((400, 2), np.int64)
    bots.random_playouts(np.arange(400, dtype=np.int64), rules.DICE_RNG, scores)
    rng = random.Random(0)
    ref = np.array([reference.random_game(rng) for _ in range(200)], np.float64)
    # Means of ~50 with std ~12 per player: the two estimates agree within a few SE.
    se = np.sqrt(scores.var() / scores.size + ref.var() / ref.size)
    assert abs(scores.mean() - ref.mean()) < 4 * se


def test_model_agent_options(tmp_path):
    import pytest

    from leaguezero.az.checkpoint import save_checkpoint
    from leaguezero.yatzy.agents.model import YATZY_SCHEMA, PolicyAgent
    from leaguezero.yatzy.net.networks import MODEL_KIND, build_net

    net = build_net(hidden=16, blocks=0)
    path = tmp_path / "tiny.pt"
    save_checkpoint(path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=YATZY_SCHEMA)
    searched = make_agent(f"model:{path}?sims=6&c_puct=2.5&normalize_q=false")
    params = searched.search.params
    assert (params.c_puct, params.normalize_q) == (2.5, False)
    assert make_agent(f"model:{path}?sims=6").search.params.normalize_q is True  # the default
    assert isinstance(make_agent(f"model:{path}?sims=0"), PolicyAgent)
    _play(searched, games=2)
    with pytest.raises(ValueError, match=r"unknown model option.*normalize_q"):
        make_agent(f"model:{path}?sims=6&normalise_q=false")
