"""Compact positions (protocol kind 4): the turn search sends 9 int32 a successor and the server
encodes them, with the answers of the in-process value path."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.local import TorchEvaluator, resolve_dtype
from leaguezero.az.inference.protocol import (
    LENGTH,
    POSITION_HEADER,
    Status,
    encode_position_request,
)
from leaguezero.az.inference.server import ServedModel, ServerSettings
from leaguezero.yatzy.game.positions import (
    POSITION_SCHEMA_ID,
    POSITION_WIDTH,
    check_positions,
    encode_turn_positions,
    turn_position_codec,
)
from leaguezero.yatzy.game.rules import (
    DICE_RNG,
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    STATE_LEN,
    apply_actions_batch,
    new_matches,
    terminal_mask,
)
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from leaguezero.yatzy.search.turn import TurnSearch
from leaguezero.yatzy.search.turn_dp import NUM_SLOTS, successor_batch, successor_positions
from tests.az.test_server_hostile import _InProcessServer, _raw_request


def _played_states(games: int, rounds: int, seed: int = 0) -> np.ndarray:
    """States of ``games`` games after ``rounds`` rounds of turn-search play (varied boards)."""
    net = build_net(hidden=16, seed=seed, num_features=NUM_TURN_FEATURES, arch="board_towers")
    search = TurnSearch(TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0))
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + 1000 * seed, DICE_RNG)
    done = np.zeros(games, np.bool_)
    for _ in range(rounds):
        terminal_mask(states, done)
        rows = np.flatnonzero(~done).astype(np.int64)
        actions, _, _ = search.decide(states, rows)
        apply_actions_batch(states, rows, actions)
    terminal_mask(states, done)
    return np.ascontiguousarray(states[~done])


def _successors(states: np.ndarray):
    """(features, positions, row_of, succ) of every game's successors, both ways."""
    rows = np.arange(len(states), dtype=np.int64)
    n = len(rows) * NUM_SLOTS
    feats = np.zeros((n, NUM_TURN_FEATURES), np.float32)
    positions = np.zeros((n, POSITION_WIDTH), np.int32)
    row_of = np.zeros((2, len(rows), NUM_SLOTS), np.int64)
    succ = np.zeros((2, len(rows), NUM_SLOTS))
    k = successor_batch(states, rows, feats, row_of[0], succ[0], 1.0, 50.0)
    k2 = successor_positions(states, rows, positions, row_of[1], succ[1], 1.0, 50.0)
    assert k == k2
    np.testing.assert_array_equal(row_of[0], row_of[1])
    np.testing.assert_array_equal(succ[0], succ[1])
    return feats[:k], positions[:k]


def test_positions_encode_to_the_features_the_search_writes() -> None:
    for rounds in (0, 7, 40, 84):  # fresh boards, mid-game, near the end (terminal marks)
        feats, positions = _successors(_played_states(32, rounds, seed=rounds))
        assert check_positions(positions) == -1
        out = np.full_like(feats, np.nan)
        encode_turn_positions(positions, out)
        np.testing.assert_array_equal(out, feats)


def test_check_positions_finds_the_first_row_out_of_range() -> None:
    _, positions = _successors(_played_states(4, 3))
    bad_values = [
        (S_AVAIL, -1), (S_AVAIL + 1, 1 << 15), (S_UPPER, 64), (S_UPPER + 1, -1),
        (S_SCORE, 1024), (S_SCORE + 1, -5), (S_DICE, 252), (S_REROLLS, 3), (S_PLAYER, 2),
    ]  # fmt: skip
    for column, value in bad_values:
        bad = positions.copy()
        bad[5, column] = value
        assert check_positions(bad) == 5, (column, value)


@pytest.fixture(params=["float32", "bfloat16"])
def turn_server(tmp_path, request):
    """An in-process server of a default-width turn net with the position codec, in float32
    and in bfloat16 (self-play's dtype on CPUs with bf16 units); yields (net, dtype, address,
    server)."""
    torch.set_num_threads(1)
    net = build_net(hidden=256, seed=3, num_features=NUM_TURN_FEATURES, arch="board_towers")
    dtype = resolve_dtype(request.param)
    served = ServedModel(
        net, TURN_FEATURE_SCHEMA_ID, "turn", dtype=dtype, positions=turn_position_codec()
    )
    plain = ServedModel(
        build_net(hidden=16, seed=3, num_features=NUM_TURN_FEATURES, arch="board_towers"),
        TURN_FEATURE_SCHEMA_ID, "no codec",
    )  # fmt: skip
    settings = ServerSettings(max_batch=4096, max_wait_us=100)
    server = _InProcessServer(settings, str(tmp_path / "p.sock"), {0: served, 1: plain})
    try:
        yield net, dtype, server.address, server
    finally:
        server.close()


def test_position_values_are_bit_identical_to_in_process(turn_server) -> None:
    net, dtype, address, _ = turn_server
    local = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0, dtype=dtype)
    feats, positions = _successors(_played_states(48, 10, seed=1))
    expected = local.evaluate_values(feats)
    with InferenceClient(
        address, feature_schema_id=TURN_FEATURE_SCHEMA_ID, num_actions=47, health_interval_s=None
    ) as client:
        client.margin_weight = 1.0
        # One request holding the rows of one in-process call: the same boards in the same
        # runs, the same padded shapes: the same bits.
        got = client.evaluate_position_values(positions, POSITION_SCHEMA_ID, len(positions))
        np.testing.assert_array_equal(got, expected)
        # Chunked (the server deduplicates per batch): equal up to float rounding.
        chunked = client.evaluate_position_values(positions, POSITION_SCHEMA_ID, 700)
        tolerance = 1e-6 if dtype == torch.float32 else 2e-2
        np.testing.assert_allclose(chunked, expected, atol=tolerance)


def test_turn_search_through_positions_plays_as_in_process(turn_server) -> None:
    net, dtype, address, _ = turn_server
    local = TurnSearch(TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0, dtype=dtype))
    with InferenceClient(
        address, feature_schema_id=TURN_FEATURE_SCHEMA_ID, num_actions=47, health_interval_s=None
    ) as client:
        client.margin_weight = 1.0
        remote = TurnSearch(client)
        assert remote._by_position and not local._by_position
        states = _played_states(24, 0, seed=2)
        rows = np.arange(len(states), dtype=np.int64)
        for _ in range(9):
            a_local, v_local, _ = local.decide(states, rows)
            a_remote, v_remote, _ = remote.decide(states, rows)
            tolerance = 1e-5 if dtype == torch.float32 else 5e-2
            np.testing.assert_allclose(v_remote, v_local, atol=tolerance)
            if dtype == torch.float32:
                np.testing.assert_array_equal(a_remote, a_local)
            apply_actions_batch(states, rows, a_local)
        assert remote.evaluations == local.evaluations > 0


def test_hostile_position_requests_get_error_replies(turn_server) -> None:
    _, _, address, _ = turn_server
    _, positions = _successors(_played_states(2, 1))
    path = address.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(path)

        def ask(rid, model_id=0, schema=TURN_FEATURE_SCHEMA_ID, pschema=1, rows=positions):
            frame = encode_position_request(rid, model_id, schema, pschema, rows)
            return _raw_request(raw, frame)

        bad = positions.copy()
        bad[3, S_UPPER] = 10**6  # would index far outside the one-hot
        reply = ask(1, rows=bad)
        assert reply.status == Status.MALFORMED and "row 3" in reply.message
        assert ask(2, rows=positions[:, :8]).status == Status.SHAPE_MISMATCH
        assert ask(3, pschema=9).status == Status.SCHEMA_MISMATCH
        assert ask(4, schema=1).status == Status.SCHEMA_MISMATCH
        assert ask(5, model_id=1).status == Status.SCHEMA_MISMATCH  # a model without a codec
        # Sizes that do not add up are malformed; logits (A != 0) from a values-only codec are
        # refused as a shape mismatch that says so.
        body = encode_position_request(6, 0, TURN_FEATURE_SCHEMA_ID, 1, positions)[4:]
        short = body[:-4]  # one int short of N x W
        assert _raw_request(raw, LENGTH.pack(len(short)) + short).status == Status.MALFORMED
        body = bytearray(body)
        body[POSITION_HEADER.size - 4] = 47  # A = 47: logits too
        reply = _raw_request(raw, LENGTH.pack(len(body)) + body)
        assert reply.status == Status.SHAPE_MISMATCH and "values only" in reply.message
        ok = ask(7)
        assert ok.ok and len(ok.values) == len(positions)
