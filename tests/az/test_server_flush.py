"""When the inference server flushes a batch (issue 44): at once when every connection that uses
a model has a frame queued (``eager_flush``), else at ``max_batch`` rows or after ``max_wait_us``;
and forward passes on the event loop's thread or on an executor thread give the same replies.

The windows here are a minute long, so a frame that the eager rule does not flush would sit far
past every deadline the tests wait on: no test depends on timing."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
import torch

from leaguezero.az.inference.local import forward_numpy
from leaguezero.az.inference.protocol import LENGTH, decode_reply, encode_eval_request
from leaguezero.az.inference.server import ServedModel, ServerSettings
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from tests.az.test_forward_budget import _Recording
from tests.az.test_server import random_batch
from tests.az.test_server_hostile import _InProcessServer

MINUTE_US = 60_000_000


def _server(tmp_path, **settings) -> tuple[_InProcessServer, _Recording]:
    net = _Recording(build_net(hidden=32, blocks=1, margin_head=True, seed=1))
    server = _InProcessServer(
        ServerSettings(max_batch=4096, max_wait_us=MINUTE_US, **settings),
        str(tmp_path / "f.sock"),
        {0: ServedModel(net, FEATURE_SCHEMA_ID, "recording")},
    )
    return server, net


def _connect(tmp_path) -> socket.socket:
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(str(tmp_path / "f.sock"))
    raw.settimeout(120)  # a held frame would take a minute; this fails the test first
    return raw


def _send(raw: socket.socket, request_id: int, rows: int) -> None:
    features, legal = random_batch(np.random.default_rng(request_id), rows)
    raw.sendall(encode_eval_request(request_id, 0, FEATURE_SCHEMA_ID, features, legal))


def _reply(raw: socket.socket):
    (length,) = LENGTH.unpack(raw.recv(4, socket.MSG_WAITALL))
    reply = decode_reply(raw.recv(length, socket.MSG_WAITALL))
    assert reply.ok, reply.message
    return reply


def _wait_queued(server: _InProcessServer, count: int) -> None:
    deadline = time.monotonic() + 60
    while server.stats()[1] != count:
        assert time.monotonic() < deadline, "the frame never reached the server's queue"
        time.sleep(0.01)


def test_a_lone_client_is_answered_without_the_batching_window(tmp_path) -> None:
    server, net = _server(tmp_path)
    try:
        with _connect(tmp_path) as raw:
            for i in range(5):  # each answered long before the minute's window closes
                _send(raw, i + 1, 3 + i)
                assert _reply(raw).request_id == i + 1
        assert net.rows_seen == [3, 4, 5, 6, 7]
    finally:
        server.close()


def test_clients_are_batched_together_once_each_has_sent(tmp_path) -> None:
    server, net = _server(tmp_path)
    try:
        with _connect(tmp_path) as a, _connect(tmp_path) as b:
            _send(a, 1, 2)  # a is the model's only client so far: answered at once
            _reply(a)
            _send(b, 2, 3)  # b's frame waits: a uses the model too and may send more
            _wait_queued(server, 1)
            assert net.rows_seen == [2]
            _send(a, 3, 5)  # now both wait: one batch of 3 + 5 rows
            assert _reply(b).request_id == 2 and _reply(a).request_id == 3
            assert net.rows_seen == [2, 8]
            b.close()
            _send(a, 4, 4)  # b has gone: a alone again, answered without the window
            assert _reply(a).request_id == 4
        assert net.rows_seen == [2, 8, 4]
    finally:
        server.close()


def test_without_eager_flush_a_lone_clients_frame_waits_for_the_window(tmp_path) -> None:
    server, net = _server(tmp_path, eager_flush=False)
    try:
        with _connect(tmp_path) as raw:
            _send(raw, 1, 3)
            _wait_queued(server, 1)  # held by the minute's window
            _send(raw, 2, 4)
            _wait_queued(server, 2)
            assert net.rows_seen == []
    finally:
        server.close()


@pytest.mark.parametrize("forward_on", ["loop", "thread", "auto"])
def test_forward_on_the_loop_or_a_thread_gives_the_same_replies(tmp_path, forward_on) -> None:
    assert ServerSettings(forward_on="auto").forward_on_loop()  # a CPU device: the loop
    assert not ServerSettings(forward_on="auto", device="cuda").forward_on_loop()
    server, net = _server(tmp_path, forward_on=forward_on)
    features, legal = random_batch(np.random.default_rng(9), 6)
    expected = forward_numpy(net, features.copy(), torch.device("cpu"), legal.copy())
    try:
        with _connect(tmp_path) as raw:
            raw.sendall(encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal))
            reply = _reply(raw)
        np.testing.assert_allclose(reply.values, expected.values, atol=1e-6)
        np.testing.assert_allclose(reply.logits, expected.logits, atol=1e-6)
    finally:
        server.close()


def test_an_unknown_forward_placement_is_refused() -> None:
    with pytest.raises(ValueError, match="forward_on must be auto, loop or thread"):
        ServerSettings(forward_on="gpu")
