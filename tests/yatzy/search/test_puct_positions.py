"""PUCT leaves as compact positions (protocol kind 4 with logits, issue 44): the search sends
9 int32 a leaf and the server encodes the features and the legal actions itself, so the
searches through the server play as in process."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.az.inference.protocol import Status, encode_position_request
from leaguezero.az.inference.server import ServedModel, ServerSettings
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES, encode_into
from leaguezero.yatzy.game.positions import (
    POSITION_SCHEMA_ID,
    POSITION_WIDTH,
    check_positions,
    pov_position_codec,
)
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, new_matches, policy_mask
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.net.networks import build_net
from leaguezero.yatzy.search.puct import make_search
from leaguezero.yatzy.search.settings import SearchSettings
from tests.az.test_server_hostile import _InProcessServer, _raw_request
from tests.yatzy.search.test_positions import _played_states


def _roll_states(games: int, seed: int) -> np.ndarray:
    """Mid-game states at every roll stage: played boards, then fresh dice and rerolls."""
    states = _played_states(games, seed % 50, seed=seed)
    rng = np.random.default_rng(seed)
    states[:, 6] = rng.integers(0, 252, len(states))  # dice
    states[:, 7] = rng.integers(0, 3, len(states))  # rerolls left
    return states


def test_the_codec_gives_the_features_and_legal_actions_of_the_search() -> None:
    codec = pov_position_codec()
    for seed in (0, 7, 40, 84):
        states = _roll_states(24, seed)
        rows = np.ascontiguousarray(states[:, :POSITION_WIDTH], np.int32)
        assert check_positions(rows) == -1
        feats = np.zeros((len(states), NUM_FEATURES), np.float32)
        legal = np.zeros((len(states), NUM_ACTIONS), np.bool_)
        for i, state in enumerate(states):
            encode_into(state, feats[i])
            policy_mask(state, legal[i])
        np.testing.assert_array_equal(codec.encode(rows), feats)
        np.testing.assert_array_equal(codec.legal(rows), legal)


@pytest.fixture
def puct_server(tmp_path):
    """An in-process server of a schema-1 net with the PUCT codec (model 0) and the same net
    without a codec (model 1); yields (net, address)."""
    torch.set_num_threads(1)
    net = build_net(hidden=64, blocks=1, margin_head=True, seed=5)
    served = ServedModel(net, FEATURE_SCHEMA_ID, "puct", positions=pov_position_codec())
    plain = ServedModel(net, FEATURE_SCHEMA_ID, "no codec")
    server = _InProcessServer(
        ServerSettings(max_batch=4096), str(tmp_path / "q.sock"), {0: served, 1: plain}
    )
    try:
        yield net, server.address
    finally:
        server.close()


def _search(evaluator, games: int):
    mcts = SearchSettings(budget_reroll=24, budget_mark=12)
    return make_search(evaluator, mcts, max_games=games, seed=3)


@pytest.mark.parametrize("pipeline", [False, True])
def test_puct_through_positions_searches_as_in_process(puct_server, pipeline) -> None:
    net, address = puct_server
    states = _roll_states(16, 11)
    seeds = np.arange(len(states), dtype=np.int64) + 77
    local = _search(TorchEvaluator(net, FEATURE_SCHEMA_ID), len(states))
    want = local.run(states, seeds, add_noise=False)
    with InferenceClient(
        address, feature_schema_id=FEATURE_SCHEMA_ID, num_actions=NUM_ACTIONS,
        health_interval_s=None,
    ) as client:  # fmt: skip
        remote = _search(client, len(states))
        remote.pipeline = pipeline
        assert remote.send_positions  # the client takes positions: leaves go as rows
        got = remote.run(states, seeds, add_noise=False)
        sent = client.stats.requests
        remote.send_positions = False  # the same search with features and legal bits
        features = remote.run(states, seeds, add_noise=False)
        assert client.stats.requests > sent
    for result in (got, features):
        np.testing.assert_allclose(result.pi, want.pi, atol=1e-6)
        np.testing.assert_array_equal(result.actions, want.actions)
        np.testing.assert_allclose(result.raw_priors, want.raw_priors, atol=1e-5)
        np.testing.assert_allclose(result.root_value, want.root_value, atol=1e-5)


def test_position_logits_are_masked_and_bad_requests_refused(puct_server) -> None:
    _, address = puct_server
    states = _roll_states(6, 3)
    rows = np.ascontiguousarray(states[:, :POSITION_WIDTH], np.int32)
    legal = pov_position_codec().legal(rows)
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(address.removeprefix("unix://"))

        def ask(rid, model_id=0, actions=NUM_ACTIONS, positions=rows):
            frame = encode_position_request(
                rid, model_id, FEATURE_SCHEMA_ID, POSITION_SCHEMA_ID, positions, actions
            )
            return _raw_request(raw, frame)

        reply = ask(1)
        assert reply.ok and reply.logits.shape == (len(rows), NUM_ACTIONS)
        assert np.isneginf(reply.logits[~legal]).all() and np.isfinite(reply.logits[legal]).all()
        values_only = ask(2, actions=0)
        assert values_only.ok and values_only.logits.shape == (len(rows), 0)
        np.testing.assert_allclose(values_only.values, reply.values, atol=1e-6)
        wrong = ask(3, actions=12)
        assert wrong.status == Status.SHAPE_MISMATCH and "A=12" in wrong.message
        assert ask(4, model_id=1).status == Status.SCHEMA_MISMATCH  # no codec
        bad = rows.copy()
        bad[2, 6] = 999  # dice index out of range: refused before the encoder reads it
        reply = ask(5, positions=bad)
        assert reply.status == Status.MALFORMED and "row 2" in reply.message


def test_leaf_positions_are_the_state_rows_the_search_encodes() -> None:
    states = np.zeros((4, STATE_LEN), np.int64)
    new_matches(states, np.arange(4, dtype=np.int64), DICE_RNG)
    search = _search(TorchEvaluator(build_net(hidden=16, seed=1), FEATURE_SCHEMA_ID), 4)
    assert not search.send_positions  # in process: features, as before
    search.run(states, np.arange(4, dtype=np.int64))
    batch = search.batch
    codec = pov_position_codec()
    rows = int((batch.positions[:, 0] != 0).sum())  # the last round's leaves (open boards)
    assert rows > 0
    np.testing.assert_array_equal(codec.encode(batch.positions[:rows]), batch.features[:rows])
    np.testing.assert_array_equal(codec.legal(batch.positions[:rows]), batch.legal[:rows])
