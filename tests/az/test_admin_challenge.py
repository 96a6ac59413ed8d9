"""The admin token never crosses the wire (issue 41 item 3), and peers of another protocol
version fail in one line.

A squatter holds the TCP port before the real server (another user, started first): it sees
everything ``yz infer-load`` sends. With challenge-response that is a signature over the
squatter's own nonce, which the real server refuses however it is replayed.

The squatter and the replays are raw sockets and protocol numbers (not this package's
helpers), so the test reads the same against an older client.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

from leaguezero.az.inference.client import InferenceClient, InferenceError
from leaguezero.az.inference.protocol import (
    LENGTH,
    PROTOCOL_VERSION,
    REPLY_HEADER,
    Status,
    decode_reply,
    encode_control_request,
    encode_eval_request,
)
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from tests.az.test_server import make_checkpoint, random_batch, start_server
from tests.az.test_server_hostile import _raw_request, _tcp, _wait_for

OP_LOAD_MODEL, OP_CHALLENGE = 1, 3  # protocol numbers, spelled out on purpose (see above)
KIND_CONTROL = 3


def _reply(version: int, request_id: int, status: int, text: str) -> bytes:
    body = REPLY_HEADER.pack(b"LZ", version, 2, request_id, status, 0, 0, 0) + text.encode()
    return LENGTH.pack(len(body)) + body


class _Squatter:
    """A raw TCP listener that holds a port: records every byte, answers a challenge with a
    nonce of its own and every other control request with OK (as if it had loaded the model),
    in whatever protocol version the client spoke."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.address = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.received = b""
        self.load_arguments: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                self.received += head
                if len(head) < 4:
                    return
                body = conn.recv(LENGTH.unpack(head)[0], socket.MSG_WAITALL)
                self.received += body
                version, kind = body[2], body[3]
                (request_id,) = struct.unpack_from("<Q", body, 4)
                if kind != KIND_CONTROL:
                    conn.sendall(_reply(version, request_id, 8, "squatter"))
                    continue
                (op,) = struct.unpack_from("<I", body, 12)
                if op == OP_CHALLENGE:
                    text = json.dumps({"nonce": os.urandom(32).hex()})
                elif op == OP_LOAD_MODEL:
                    self.load_arguments.append(body[20:].decode())
                    text = '{"0": {"source": "squatted"}}'
                else:
                    text = '{"models": {}}'
                conn.sendall(_reply(version, request_id, 0, text))

    def close(self) -> None:
        self.listener.close()


def test_a_port_squatter_learns_nothing_it_can_replay(tmp_path) -> None:
    token_file = tmp_path / "token"
    ckpt = make_checkpoint(tmp_path / "m.pt", 1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    squatter = _Squatter()
    try:
        # The owner's `yz infer-load` talks to whoever holds the port.
        from leaguezero.az.inference.admin import load_or_create_token

        token, _ = load_or_create_token(token_file)
        load = [sys.executable, "-m", "leaguezero", "yatzy", "infer-load", "--bind"]
        cli = subprocess.run(
            [*load, squatter.address, "--model", f"0={ckpt}", "--token-file", str(token_file)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        _wait_for(lambda: squatter.load_arguments, what="the squatted load")
        captured = squatter.received
        assert token.encode() not in captured and bytes.fromhex(token) not in captured
        assert token.encode().hex().encode() not in captured
        arguments = list(squatter.load_arguments)
    finally:
        squatter.close()
    # The real server, with the same token: nothing the squatter saw loads anything.
    server = start_server(
        "--model", str(ckpt), "--bind", "tcp://127.0.0.1:0", "--metrics-port", "-1",
        "--admin-token-file", str(token_file),
    )  # fmt: skip
    try:
        with _tcp(server.address) as raw:
            rid = 1
            for argument in arguments:
                # Replayed as it was, and replayed right after a fresh challenge of our own.
                for ask_first in (False, True):
                    if ask_first:
                        challenge = encode_control_request(rid, OP_CHALLENGE, 0)
                        assert _raw_request(raw, challenge).ok
                        rid += 1
                    replay = encode_control_request(rid, OP_LOAD_MODEL, 0, argument)
                    assert _raw_request(raw, replay).status == Status.UNAUTHORIZED
                    rid += 1
        # The owner's own load, through the real server, works.
        cli = subprocess.run(
            [*load, server.address, "--model", f"0={ckpt}", "--token-file", str(token_file)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
    finally:
        assert server.stop() == 0


def test_a_signature_loads_only_what_it_signs(tmp_path) -> None:
    from leaguezero.az.inference.admin import admin_signature, load_or_create_token, with_signature

    token_file = tmp_path / "token"
    token, _ = load_or_create_token(token_file)
    good, other = make_checkpoint(tmp_path / "a.pt", 1), make_checkpoint(tmp_path / "b.pt", 2)
    server = start_server(
        "--model", str(good), "--bind", "tcp://127.0.0.1:0", "--metrics-port", "-1",
        "--admin-token-file", str(token_file),
    )  # fmt: skip
    try:
        with _tcp(server.address) as raw:

            def challenge(rid: int) -> bytes:
                reply = _raw_request(raw, encode_control_request(rid, OP_CHALLENGE, 0))
                return bytes.fromhex(json.loads(reply.message)["nonce"])

            def load(rid: int, model_id: int, path: str, signature: str) -> Status:
                argument = with_signature(path, signature)
                return _raw_request(
                    raw, encode_control_request(rid, OP_LOAD_MODEL, model_id, argument)
                ).status

            nonce = challenge(1)
            signed = admin_signature(token, nonce, 0, str(good))
            assert load(2, 0, str(other), signed) == Status.UNAUTHORIZED  # another path
            nonce = challenge(3)
            signed = admin_signature(token, nonce, 0, str(good))
            assert load(4, 1, str(good), signed) == Status.UNAUTHORIZED  # another model id
            nonce = challenge(5)
            signed = admin_signature(token, nonce, 0, str(good))
            assert load(6, 0, str(good), signed) == Status.OK
            assert load(7, 0, str(good), signed) == Status.UNAUTHORIZED  # a nonce signs once
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- versions
@pytest.mark.parametrize("old", [1, PROTOCOL_VERSION - 1])
def test_an_older_client_gets_one_line_it_can_read(tmp_path, old) -> None:
    server = start_server("--model", "dummy", "--bind", f"unix://{tmp_path}/v.sock")
    features, legal = random_batch(np.random.default_rng(0), 2)
    frame = bytearray(encode_eval_request(7, 0, FEATURE_SCHEMA_ID, features, legal))
    frame[4 + 2] = old  # what an older client sends
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(f"{tmp_path}/v.sock")
            raw.sendall(bytes(frame))
            (length,) = LENGTH.unpack(raw.recv(4, socket.MSG_WAITALL))
            body = raw.recv(length, socket.MSG_WAITALL)
        # The reply is in the old client's version, so its decoder reads it.
        _, version, kind, request_id, status, _, n, _ = REPLY_HEADER.unpack_from(body, 0)
        assert (version, kind, request_id, status, n) == (old, 2, 7, Status.UNSUPPORTED_VERSION, 0)
        text = body[REPLY_HEADER.size :].decode()
        assert "\n" not in text and f"version {old}" in text
        assert f"speaks {PROTOCOL_VERSION}" in text
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("old", [1, PROTOCOL_VERSION - 1])
def test_this_client_against_an_older_server_fails_in_one_line(old) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    received = []

    def old_server() -> None:  # what an older server answers every frame of this version
        conn, _ = listener.accept()
        with conn:
            while head := conn.recv(4, socket.MSG_WAITALL):
                body = conn.recv(LENGTH.unpack(head)[0], socket.MSG_WAITALL)
                received.append(body)
                (rid,) = struct.unpack_from("<Q", body, 4)
                text = f"protocol version {PROTOCOL_VERSION} is not supported; server speaks {old}"
                conn.sendall(_reply(old, rid, Status.UNSUPPORTED_VERSION, text))

    threading.Thread(target=old_server, daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    features, legal = random_batch(np.random.default_rng(0), 2)
    client = InferenceClient(
        address, feature_schema_id=FEATURE_SCHEMA_ID, num_actions=NUM_ACTIONS,
        health_interval_s=None, connect_timeout_s=60,
    )  # fmt: skip
    try:
        with pytest.raises(InferenceError) as info:
            client.evaluate(features, legal)
        message = str(info.value)
        assert "UNSUPPORTED_VERSION" in message and "\n" not in message
        assert f"speaks {old}" in message
        token = "cd" * 32
        with pytest.raises(InferenceError, match="UNSUPPORTED_VERSION"):
            client.load_model(0, "/x.pt", admin_token=token)  # the challenge fails first
        assert all(token.encode() not in body for body in received)
    finally:
        client.close()
        listener.close()


def test_decode_reply_reads_an_error_of_another_version() -> None:
    body = _reply(1, 5, Status.UNSUPPORTED_VERSION, "old")[4:]
    reply = decode_reply(body)
    assert reply.status == Status.UNSUPPORTED_VERSION and reply.request_id == 5
    assert "old" in reply.message and "version 1" in reply.message
