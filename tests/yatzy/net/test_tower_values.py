"""The board-tower net's value-only forward (each board's tower once) against its plain forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, apply_actions_batch, new_matches
from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from leaguezero.yatzy.net.tower_values import (
    ME_COLS,
    OPP_COLS,
    TowerValues,
    board_ids_pair,
)
from leaguezero.yatzy.search.turn import TurnSearch


class PlainEvaluator:
    """The same evaluator seen through ``evaluate`` only: the plain forward, priors and all."""

    def __init__(self, inner: TorchEvaluator) -> None:
        self.inner = inner
        self.feature_schema_id = inner.feature_schema_id
        self.num_actions = inner.num_actions
        self.margin_weight = inner.margin_weight

    def evaluate(self, features, legal):
        return self.inner.evaluate(features, legal)


class Recorder(PlainEvaluator):
    """Records the feature batches the turn search asks for."""

    def __init__(self, inner: TorchEvaluator) -> None:
        super().__init__(inner)
        self.batches: list[np.ndarray] = []

    def evaluate(self, features, legal):
        self.batches.append(features.copy())
        return super().evaluate(features, legal)


def play(evaluator, games: int = 48, rounds: int = 60, seed: int = 3) -> list[np.ndarray]:
    """Lockstep turn-search play; the actions of every round."""
    search = TurnSearch(evaluator)
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + seed * games, DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    history = []
    for _ in range(rounds):
        actions, _, _ = search.decide(states, rows)
        history.append(actions.copy())
        apply_actions_batch(states, rows, actions)
    return history


def tower_net(seed: int = 5):
    """The default turn-search network (board towers, 256 wide), freshly initialised."""
    return build_net(arch="board_towers", seed=seed, num_features=169)


@pytest.fixture(scope="module")
def successor_batches() -> list[np.ndarray]:
    recorder = Recorder(TorchEvaluator(tower_net(), TURN_FEATURE_SCHEMA_ID, margin_weight=1.0))
    play(recorder, games=32, rounds=45)
    return recorder.batches


def board_ids(x: np.ndarray) -> tuple[tuple[int, int], np.ndarray, np.ndarray]:
    ids, starts = np.empty((2, len(x)), np.int64), np.empty((2, len(x)), np.int64)
    table = np.empty((2, 2 << (len(x) - 1).bit_length()), np.int64)
    counts = board_ids_pair(x.view(np.uint32), ME_COLS, OPP_COLS, ids, starts, table)
    return counts, ids, starts


def test_board_ids_number_distinct_boards_in_order_of_appearance() -> None:
    x = np.zeros((7, 169), np.float32)
    x[2:4, ME_COLS[0]] = 1.0
    x[5, ME_COLS[-1]] = 1.0  # rows 0, 1, 4 and 6 share a board that rows 2-3 and 5 break
    x[3, OPP_COLS[3]] = 0.5
    x[:, 160] = np.arange(7)  # a shared column does not split a board
    (u_me, u_opp), ids, starts = board_ids(x)
    assert (u_me, u_opp) == (3, 2)
    assert ids[0].tolist() == [0, 0, 1, 1, 0, 2, 0] and starts[0, :3].tolist() == [0, 2, 5]
    assert ids[1].tolist() == [0, 0, 0, 1, 0, 0, 0] and starts[1, :2].tolist() == [0, 3]


def test_board_ids_agree_with_numpy_unique_on_random_boards() -> None:
    # Many rows, few distinct boards in no order: hash collisions and probing are exercised.
    rng = np.random.default_rng(3)
    palette = rng.integers(0, 3, size=(40, 169)).astype(np.float32)
    x = palette[rng.integers(0, 40, size=5000)]
    (u_me, u_opp), ids, starts = board_ids(x)
    for k, cols, count in ((0, ME_COLS, u_me), (1, OPP_COLS, u_opp)):
        boards = x[:, cols]
        assert count == len(np.unique(boards, axis=0))
        np.testing.assert_array_equal(boards[starts[k, ids[k]]], boards)  # each row's own board
        assert len(np.unique(boards[starts[k, :count]], axis=0)) == count  # no board twice


def test_successor_batches_repeat_boards(successor_batches) -> None:
    # What makes the value-only forward pay: few distinct boards per call.
    x = max(successor_batches, key=len)
    assert board_ids(x)[0][0] <= len(x) // 50


@pytest.mark.parametrize("seed", [5, 6])
def test_values_match_the_plain_forward(successor_batches, seed: int) -> None:
    net = tower_net(seed)
    for dtype, tolerance in ((torch.float32, 2e-6), (torch.bfloat16, 2e-2)):
        model = net.to(dtype)
        values_of = TowerValues(model, dtype)
        for x in successor_batches[:6]:
            with torch.inference_mode():
                _, value, margin = model(torch.from_numpy(x).to(dtype))
            got_value, got_margin = values_of(x)
            np.testing.assert_allclose(got_value, value.float().numpy(), atol=tolerance)
            np.testing.assert_allclose(got_margin, margin.float().numpy(), atol=tolerance)


def test_bfloat16_bits_round_like_torch() -> None:
    # One hidden unit and no other input: the first layer's output is the bias, converted.
    net = build_net(arch="board_towers", seed=1, num_features=169, hidden=16)
    values_of = TowerValues(net, torch.bfloat16)
    rng = np.random.default_rng(0)
    bias = rng.normal(size=16).astype(np.float32) * 3
    from leaguezero.yatzy.net import tower_values

    out = np.empty((1, 16), np.uint16)
    zero = np.zeros((1, 16), np.float32)
    tower_values._first_layer_bf16(
        np.zeros((1, 169), np.float32), tower_values.SHARED_COLS, values_of.w_shared, bias,
        zero, np.zeros(1, np.int64), zero, np.zeros(1, np.int64), out, np.empty(16, np.float32),
    )  # fmt: skip
    expected = torch.from_numpy(np.maximum(bias, 0)).to(torch.bfloat16)
    assert torch.equal(torch.from_numpy(out[0]).view(torch.bfloat16), expected)


def test_self_play_moves_are_the_same_as_the_plain_path() -> None:
    net = tower_net()
    fast = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0)
    plain = PlainEvaluator(TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0))
    for fast_actions, plain_actions in zip(play(fast), play(plain), strict=True):
        np.testing.assert_array_equal(fast_actions, plain_actions)


def test_value_only_without_the_tower_path_drops_the_policy() -> None:
    # A model without value_forward (the residual MLP, e.g. the shipped `pretrained`) still
    # answers evaluate_values: its plain forward without the priors.
    net = build_net(arch="resmlp", seed=2, num_features=169)
    evaluator = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=0.5)
    x = np.random.default_rng(1).random((7, 169), dtype=np.float32)
    _, expected = evaluator.evaluate(x, np.ones((7, 47), np.bool_))
    np.testing.assert_allclose(evaluator.evaluate_values(x), expected, atol=1e-6)
    with pytest.raises(ValueError, match="expected features"):
        evaluator.evaluate_values(x[:, :10])
