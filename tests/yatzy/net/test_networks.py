"""YatzyNet shapes and ranges, and checkpoints of it round-tripping through az.checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leaguezero.az.checkpoint import SchemaIds, load_checkpoint, save_checkpoint
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, NUM_ACTIONS, RULESET_ID
from leaguezero.yatzy.net.networks import MODEL_CONSTRUCTORS, MODEL_KIND, YatzyNet, build_net

torch.set_num_threads(1)
SCHEMA = SchemaIds(FEATURE_SCHEMA_ID, ACTION_SPACE_ID, RULESET_ID)


@pytest.mark.parametrize("blocks,margin", [(0, False), (2, True)])
def test_shapes_and_ranges(blocks: int, margin: bool) -> None:
    net = YatzyNet(hidden=32, blocks=blocks, margin_head=margin)
    x = torch.randn(7, NUM_FEATURES) * 5  # large inputs: tanh heads must still stay in [-1, 1]
    logits, value, margin_out = net(x)
    assert logits.shape == (7, NUM_ACTIONS) and value.shape == (7,)
    assert value.abs().max() <= 1.0
    if margin:
        assert margin_out is not None and margin_out.shape == (7,)
        assert margin_out.abs().max() <= 1.0
    else:
        assert margin_out is None
    assert len(net.trunk) == blocks


def test_build_net_is_seeded() -> None:
    a, b, c = build_net(hidden=16, seed=3), build_net(hidden=16, seed=3), build_net(16, seed=4)
    x = torch.randn(4, NUM_FEATURES)
    assert torch.equal(a(x)[0], b(x)[0])
    assert not torch.equal(a(x)[0], c(x)[0])


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path) -> None:
    net = build_net(hidden=24, blocks=1, margin_head=True, seed=5)
    path = tmp_path / "best.pt"
    save_checkpoint(path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=SCHEMA, train_step=9)
    loaded, meta = load_checkpoint(path, MODEL_CONSTRUCTORS, expect=SCHEMA)
    assert meta.train_step == 9 and meta.kwargs["hidden"] == 24
    x = torch.randn(5, NUM_FEATURES)
    for got, want in zip(loaded(x), net.eval()(x), strict=True):
        assert torch.equal(got, want)


def test_torch_evaluator_priors_are_masked_distributions() -> None:
    net = build_net(hidden=16, blocks=1, seed=1)
    ev = TorchEvaluator(net, FEATURE_SCHEMA_ID)
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((6, NUM_FEATURES)).astype(np.float32)
    legal = rng.random((6, NUM_ACTIONS)) < 0.3
    legal[0] = False  # a row with no legal action gets all-zero priors, not NaN
    priors, values = ev.evaluate(feats, legal)
    assert priors.dtype == np.float32 and values.shape == (6,)
    assert np.all(priors[~legal] == 0) and np.all(priors[0] == 0)
    np.testing.assert_allclose(priors[1:].sum(axis=1), 1.0, rtol=1e-5)
    from leaguezero.az.evaluator import masked_softmax

    logits = net(torch.from_numpy(feats))[0].detach().numpy()
    np.testing.assert_allclose(priors, masked_softmax(logits, legal), atol=1e-6)


def test_board_tower_net_reads_both_boards_with_one_tower(tmp_path):
    from leaguezero.az.checkpoint import save_checkpoint
    from leaguezero.yatzy.agents.model import load_yatzy_model
    from leaguezero.yatzy.game.rules import S_AVAIL, S_UPPER, STATE_LEN
    from leaguezero.yatzy.game.turn_features import encode_turn
    from leaguezero.yatzy.net.networks import TOWER_KIND, BoardTowerNet
    from leaguezero.yatzy.net.schema import checkpoint_schema

    net = build_net(hidden=32, seed=2, num_features=169, arch="board_towers")
    assert isinstance(net, BoardTowerNet) and net.kind == TOWER_KIND
    state = np.zeros(STATE_LEN, np.int64)
    state[S_AVAIL], state[S_AVAIL + 1], state[S_UPPER] = 0b101010101010101, 0b111, 20
    swapped = state.copy()
    swapped[[S_AVAIL, S_AVAIL + 1, S_UPPER, S_UPPER + 1]] = state[[1, 0, 3, 2]]
    x, y = torch.from_numpy(encode_turn(state))[None], torch.from_numpy(encode_turn(swapped))[None]
    with torch.no_grad():  # my board's embedding is the opponent's after the swap
        torch.testing.assert_close(net.tower(x[:, net._me]), net.tower(y[:, net._opp]))
        logits, value, margin = net(x)
    assert logits.shape == (1, 47) and value.shape == (1,) and margin.shape == (1,)
    path = tmp_path / "towers.pt"
    save_checkpoint(path, net, kind=net.kind, kwargs=net.kwargs(), schema=checkpoint_schema("turn"))
    loaded, meta = load_yatzy_model(path)
    assert meta.kind == TOWER_KIND
    with torch.no_grad():
        torch.testing.assert_close(loaded(x)[1], value)
    with pytest.raises(ValueError, match="feature schema 2"):
        build_net(hidden=32, arch="board_towers")
