"""The turn search with a network: agent, caching, self-play samples and their targets."""

from __future__ import annotations

import numpy as np
import pytest

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.az.replay import complete_shards, read_shard
from leaguezero.yatzy.agents.match import play_match
from leaguezero.yatzy.agents.registry import make_agent
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import DICE_RNG, S_REROLLS, STATE_LEN, is_legal, new_matches
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net
from leaguezero.yatzy.net.schema import checkpoint_schema, num_features
from leaguezero.yatzy.search.puct import SearchAgent
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearch, TurnSearchAgent
from leaguezero.yatzy.search.turn_dp import NUM_SLOTS, successor_batch, successor_states
from leaguezero.yatzy.train.selfplay.turn import (
    TURN_SHARD_SCHEMA,
    run_turn_selfplay,
    td_lambda_returns,
)


class CountingEvaluator:
    """A schema-2 evaluator with a fixed value function of the features, counting its calls."""

    feature_schema_id = TURN_FEATURE_SCHEMA_ID
    num_actions = 47
    margin_weight = 0.0

    def __init__(self) -> None:
        self.calls = 0
        self.rows = 0

    def evaluate(self, features: np.ndarray, legal: np.ndarray):
        self.calls += 1
        self.rows += len(features)
        # The roller's value: score difference (feature 160 = tanh(diff / 15)) minus open boxes.
        values = 0.5 * features[:, 160] - 0.01 * features[:, :15].sum(axis=1)
        return np.zeros(legal.shape, np.float32), values.astype(np.float32)


def tiny_turn_checkpoint(path, seed: int = 0):
    net = build_net(hidden=16, blocks=0, seed=seed, num_features=num_features("turn"))
    save_checkpoint(
        path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=checkpoint_schema("turn")
    )
    return path


def test_turn_agent_plays_legal_moves_and_evaluates_once_per_turn() -> None:
    evaluator = CountingEvaluator()
    agent = TurnSearchAgent(evaluator)
    turn_starts = []

    def seen(_is_a: bool, states: np.ndarray, _actions: np.ndarray) -> None:
        turn_starts.extend(states[states[:, S_REROLLS] == 2])

    result = play_match(agent, agent, 4, seed=3, on_decision=seen)
    assert result.summary.a_win_rate == 0.5  # deterministic: a mirror match is exactly even
    assert len(turn_starts) == 4 * 30
    # Each turn start's open, non-final successors are evaluated exactly once (the 2nd and 3rd
    # decisions of a turn hit the cache).
    starts = np.array(turn_starts)
    feats = np.zeros((len(starts) * NUM_SLOTS, NUM_TURN_FEATURES), np.float32)
    row_of = np.zeros((len(starts), NUM_SLOTS), np.int64)
    succ = np.zeros((len(starts), NUM_SLOTS))
    rows = np.arange(len(starts), dtype=np.int64)
    assert evaluator.rows == successor_batch(starts, rows, feats, row_of, succ, 0.0, 50.0)


def test_turn_search_prefers_points_when_values_say_so() -> None:
    states = np.zeros((64, STATE_LEN), np.int64)
    new_matches(states, np.arange(64, dtype=np.int64), DICE_RNG)
    search = TurnSearch(CountingEvaluator())
    actions, values, turn_values = search.decide(states, np.arange(64, dtype=np.int64))
    for g in range(64):
        assert is_legal(states[g], actions[g])
        assert values[g, actions[g]] == np.nanmax(values[g])
    assert np.all(np.abs(turn_values) <= 1.0)


def test_the_turn_search_refuses_a_puct_network() -> None:
    net = build_net(hidden=8, blocks=0)
    with pytest.raises(ValueError, match="turn-start network"):
        TurnSearch(TorchEvaluator(net, 1))


def test_model_spec_picks_the_search_from_the_checkpoint(tmp_path) -> None:
    path = tiny_turn_checkpoint(tmp_path / "turn.pt")
    agent = make_agent(f"model:{path}")
    assert isinstance(agent, TurnSearchAgent)
    assert isinstance(make_agent(f"model:{path}?search=turn&sims=8"), TurnSearchAgent)
    with pytest.raises(ValueError, match="turn-search network"):
        make_agent(f"model:{path}?search=puct")
    puct = tmp_path / "puct.pt"
    net = build_net(hidden=8, blocks=0)
    save_checkpoint(
        puct, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=checkpoint_schema("puct")
    )
    assert isinstance(make_agent(f"model:{puct}?sims=2"), SearchAgent)
    with pytest.raises(ValueError, match="puct-search network"):
        make_agent(f"model:{puct}?search=turn")


def test_td_lambda_returns_interpolate_between_backups_and_outcome() -> None:
    backups = np.array([0.1, -0.2, 0.3, 0.4])
    np.testing.assert_allclose(td_lambda_returns(backups, 1.0, 0.0), backups)
    # lambda = 1: every turn gets the outcome from its own mover's view (movers alternate).
    np.testing.assert_allclose(td_lambda_returns(backups, 1.0, 1.0), [-1.0, 1.0, -1.0, 1.0])
    half = td_lambda_returns(backups, 1.0, 0.5)
    assert half[-1] == pytest.approx(0.5 * 0.4 + 0.5 * 1.0)
    assert half[-2] == pytest.approx(0.5 * 0.3 - 0.5 * half[-1])


def test_turn_selfplay_writes_one_sample_per_turn_start(tmp_path) -> None:
    cfg = YatzyConfig.model_validate(
        {"search": {"kind": "turn", "temperature": 0.02, "temperature_turns": 3},
         "selfplay": {"concurrent_games": 3, "shard_samples": 50}}
    )  # fmt: skip
    net = build_net(hidden=16, blocks=0, num_features=NUM_TURN_FEATURES)
    evaluator = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0)
    settings = SearchSettings.from_config(cfg)
    stats = run_turn_selfplay(cfg, evaluator, tmp_path, settings=settings, games=5, seed=1)
    assert stats.games == 5 and stats.samples == 5 * 30
    assert stats.decisions >= 5 * 30 and stats.sims > 0
    batches = [read_shard(p, TURN_SHARD_SCHEMA) for p in complete_shards(tmp_path)]
    feats = np.concatenate([b.features for b in batches])
    q = np.concatenate([b.q for b in batches])
    z = np.concatenate([b.z for b in batches])
    assert feats.shape == (150, NUM_TURN_FEATURES) and np.all(np.abs(q) <= 1.0)
    assert set(np.unique(z)) <= {-1.0, 0.0, 1.0}
    assert all(b.pi.sum() == 0 for b in batches)  # value-only samples: no policy target
    # Resumable: asking again for 5 games plays none.
    again = run_turn_selfplay(cfg, evaluator, tmp_path, settings=settings, games=5, seed=1)
    assert again.games == 0


def test_pretrained_agent_is_the_shipped_network(tmp_path, monkeypatch) -> None:
    from leaguezero.yatzy.agents import registry as agents

    assert agents.PRETRAINED_PATH.is_file(), "the package ships a pretrained network"
    assert isinstance(make_agent("pretrained"), TurnSearchAgent)
    monkeypatch.setattr(agents, "PRETRAINED_PATH", tmp_path / "missing.pt")
    with pytest.raises(agents.AgentSpecError, match="no pretrained network"):
        make_agent("pretrained")


def test_bfloat16_self_play_evaluator_stays_close_to_float32() -> None:
    import torch

    from leaguezero.az.inference.local import resolve_dtype

    assert resolve_dtype("float32") == torch.float32
    assert resolve_dtype("bfloat16") == torch.bfloat16
    assert resolve_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError, match="unknown inference dtype"):
        resolve_dtype("int8")
    feats = np.random.default_rng(0).random((64, NUM_TURN_FEATURES), dtype=np.float32)
    legal = np.ones((64, 47), bool)
    full = TorchEvaluator(build_net(32, 1, num_features=NUM_TURN_FEATURES), 2, margin_weight=1.0)
    half = TorchEvaluator(
        build_net(32, 1, num_features=NUM_TURN_FEATURES), 2, margin_weight=1.0,
        dtype=torch.bfloat16,
    )  # fmt: skip
    np.testing.assert_allclose(
        full.evaluate(feats, legal)[1], half.evaluate(feats, legal)[1], atol=0.02
    )


def test_two_turns_deep_values_successors_by_the_opponents_exact_turn() -> None:
    states = np.zeros((3, STATE_LEN), np.int64)
    new_matches(states, np.arange(3, dtype=np.int64), DICE_RNG)
    rows = np.arange(3, dtype=np.int64)
    one = TurnSearch(CountingEvaluator())
    two = TurnSearch(CountingEvaluator(), depth=2)
    succ = two.successor_values(states, rows)
    # Each successor's value is minus the opponent's pre-roll turn value from depth 1.
    feats = np.zeros((3 * NUM_SLOTS, NUM_TURN_FEATURES), np.float32)
    row_of = np.zeros((3, NUM_SLOTS), np.int64)
    k = successor_batch(states, rows, feats, row_of, np.zeros((3, NUM_SLOTS)), 0.0, 50.0)
    after = np.zeros((k, STATE_LEN), np.int64)
    successor_states(states, rows, row_of, after)
    _, _, opp_values = one.decide(after, np.arange(k, dtype=np.int64))
    for j in range(3):
        for s in range(NUM_SLOTS):
            if row_of[j, s] >= 0:
                assert succ[j, s] == pytest.approx(-opp_values[row_of[j, s]], abs=1e-6)
    actions, _, _ = two.decide(states, rows)
    assert all(is_legal(states[g], actions[g]) for g in range(3))
    with pytest.raises(ValueError, match="depth"):
        TurnSearch(CountingEvaluator(), depth=3)


def test_settings_that_do_not_fit_the_search_are_clear_errors(tmp_path) -> None:
    from leaguezero.common.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="board_towers reads turn starts"):
        load_config(YatzyConfig, None, ["search.kind=puct", "model.arch=board_towers"])
    path = tiny_turn_checkpoint(tmp_path / "turn.pt")
    with pytest.raises(ValueError, match="depth must be 1 or 2"):
        make_agent(f"model:{path}?depth=x")
