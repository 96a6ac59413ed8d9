"""Decision-time search (issue 53): regret matching finds known equilibria; the search agent
plays legal orders, deterministically under a seed, through the agent catalogue."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpecError, parse_agents

torch.set_num_threads(1)


def test_regret_matching_finds_rock_paper_scissors_equilibrium() -> None:
    from leaguezero.diplomacy.agents.search import regret_matching

    rps = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=float)
    row, col = regret_matching(np.stack([rps, -rps]), iters=4000)
    assert np.allclose(row, 1 / 3, atol=0.02) and np.allclose(col, 1 / 3, atol=0.02)


def test_regret_matching_finds_a_skewed_mixed_equilibrium() -> None:
    """Zero-sum [[2, -1], [-1, 1]]: both players mix 0.4 / 0.6 at equilibrium."""
    from leaguezero.diplomacy.agents.search import regret_matching

    game = np.array([[2, -1], [-1, 1]], dtype=float)
    row, col = regret_matching(np.stack([game, -game]), iters=8000)
    assert row[0] == pytest.approx(0.4, abs=0.02) and col[0] == pytest.approx(0.4, abs=0.02)
    # A dominant action is found by a single player alone.
    (solo,) = regret_matching(np.array([[0.1, 0.7, 0.3]]), iters=500)
    assert solo[1] > 0.95


def test_search_names_parse_through_the_catalogue(tmp_path) -> None:
    pytest.importorskip("diplomacy")
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig

    path = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1, value_head=True)).save(
        tmp_path / "v.pt"
    )
    (spec,) = parse_agents([f"search:{path}?k=4&iters=16&budget=0.5"])
    assert spec.kind is AgentKind.POLICY_FILE and spec.path == path
    assert dict(spec.search) == {"k": 4, "iters": 16, "budget": 0.5}
    with pytest.raises(AgentSpecError, match="not a search setting"):
        parse_agents([f"search:{path}?depth=3"])
    with pytest.raises(AgentSpecError, match=r"powers 1\.\.3"):
        parse_agents([f"search:{path}?powers=7"])
    with pytest.raises(AgentSpecError, match="unknown agent"):
        parse_agents(["search:dumb_bot"])


def test_search_agent_plays_legal_orders_deterministically(tmp_path) -> None:
    pytest.importorskip("diplomacy")
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig
    from leaguezero.diplomacy.agents.resolvers import load_policy_files, policy_resolver
    from leaguezero.diplomacy.agents.search import SearchAgent, SearchSettings
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.game.rollout import run_rollout

    config = PolicyConfig(hidden=16, layers=1, decoder="sequential", value_head=True)
    policy = DiplomacyPolicy(config, seed=4)
    with torch.no_grad():  # a value head with opinions, so the payoffs differ
        for p in policy.net.value_head.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    env = DiplomacyEnv(max_years=1)
    settings = SearchSettings(k=4, iters=32, powers=2)
    first = SearchAgent(policy, settings, seed=7).get_orders(env, "FRANCE")
    agent = SearchAgent(policy, settings, seed=7)
    assert agent.get_orders(env, "FRANCE") == first
    legal = env.legal_orders("FRANCE")
    assert sorted(o.split()[1] for o in first) == sorted(legal)
    assert all(o in legal[o.split()[1]] for o in first)
    players, payoffs = agent.last["players"], agent.last["payoffs"]
    assert players[0] == "FRANCE" and len(players) == 2
    assert payoffs.shape[0] == 2 and payoffs.shape[1] >= 2 and np.ptp(payoffs) > 0

    path = policy.save(tmp_path / "v.pt")
    specs = parse_agents([f"search:{path}?k=3&iters=8", "dumb_bot"])
    loaded = load_policy_files(specs)
    seating = {p: specs[0] if p == "FRANCE" else specs[1] for p in POWERS}
    cfg = DiplomacyConfig(max_years=1, games_dir=None, run={"seed": 3})
    results = []
    for _ in range(2):  # a fresh resolver per game: its seat counter starts again
        resolver = policy_resolver({specs[0].name: path}, seed=2, loaded=loaded)
        results.append(run_rollout(cfg, 0, 0, seating, "FRANCE", resolver=resolver))
    assert sum(results[0].invalid_orders.values()) == 0
    assert results[0].order_history == results[1].order_history


def test_search_over_a_policy_without_a_value_head_is_refused_before_play(tmp_path) -> None:
    pytest.importorskip("diplomacy")
    from leaguezero.diplomacy.agents.policy import CheckpointError, DiplomacyPolicy
    from leaguezero.diplomacy.agents.resolvers import load_policy_files

    path = DiplomacyPolicy().save(tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="no value head"):
        load_policy_files(parse_agents([f"search:{path}"]))


def test_search_keeps_the_greedy_orders_as_first_candidate(tmp_path) -> None:
    """Candidate 0 of every searched power is the policy's greedy joint order, so k=1 plays
    exactly what the greedy raw policy plays (and a spent budget falls back to it)."""
    pytest.importorskip("diplomacy")
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig
    from leaguezero.diplomacy.agents.search import SearchAgent, SearchSettings
    from leaguezero.diplomacy.game.env import DiplomacyEnv

    config = PolicyConfig(hidden=16, layers=1, decoder="sequential", value_head=True)
    policy = DiplomacyPolicy(config, seed=5)
    env = DiplomacyEnv(max_years=1)
    greedy = policy.actor(seed=0, greedy=True).get_orders(env, "AUSTRIA")
    alone = SearchAgent(policy, SearchSettings(k=1, iters=4, powers=1), seed=3)
    assert alone.get_orders(env, "AUSTRIA") == greedy
    agent = SearchAgent(policy, SearchSettings(k=6, iters=16, powers=2), seed=3)
    agent.get_orders(env, "AUSTRIA")
    first = agent.last["candidates"][0]
    assert first[0] == greedy and len(first) >= 2
    neighbour = agent.last["players"][1]
    assert agent.last["candidates"][1][0] == policy.actor(seed=9, greedy=True).get_orders(
        env, neighbour
    )
