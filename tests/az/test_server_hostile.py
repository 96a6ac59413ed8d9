"""Hostile clients of the inference server (issue 16): admin operations need the admin token
(a signed challenge) over TCP and leak nothing about the file system, non-finite features get
an error status, and a client that never reads its replies cannot make the server buffer
without bound."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
import time

import numpy as np

from leaguezero.az.inference.admin import (
    admin_signature,
    default_token_path,
    read_token,
    with_signature,
)
from leaguezero.az.inference.endpoint import parse_endpoint
from leaguezero.az.inference.protocol import (
    LENGTH,
    ControlOp,
    Status,
    decode_reply,
    encode_control_request,
    encode_eval_request,
)
from leaguezero.az.inference.server import InferenceServer, ServedModel, ServerSettings
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from tests.az.test_server import (
    client_for,
    expected,
    make_checkpoint,
    random_batch,
    start_server,
)


def _wait_for(predicate, timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _raw_request(sock: socket.socket, frame: bytes):
    sock.sendall(frame)
    (length,) = LENGTH.unpack(sock.recv(4, socket.MSG_WAITALL))
    return decode_reply(sock.recv(length, socket.MSG_WAITALL))


def _signed_load(sock: socket.socket, rid: int, path: str, token: str, model_id: int = 0) -> bytes:
    """A LOAD_MODEL frame signed under ``token`` for a challenge asked on ``sock`` first."""
    challenge = _raw_request(sock, encode_control_request(rid, ControlOp.CHALLENGE, 0))
    assert challenge.ok, challenge.message
    nonce = bytes.fromhex(json.loads(challenge.message)["nonce"])
    argument = with_signature(path, admin_signature(token, nonce, model_id, path))
    return encode_control_request(rid, ControlOp.LOAD_MODEL, model_id, argument)


def _tcp(address: str) -> socket.socket:
    endpoint = parse_endpoint(address)
    return socket.create_connection((endpoint.host, endpoint.port), timeout=60)


# ---------------------------------------------------------------------------- item 1
def test_tcp_model_load_needs_the_admin_token_and_reveals_no_paths(tmp_path) -> None:
    first = make_checkpoint(tmp_path / "first.pt", 1)
    second = make_checkpoint(tmp_path / "second.pt", 2)
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "exists.pt").write_bytes(b"not a checkpoint")
    server = start_server("--model", str(first), "--bind", "tcp://127.0.0.1:0")
    features, legal = random_batch(np.random.default_rng(1), 3)
    try:
        token_file = default_token_path()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600  # only the owner can read it
        token = read_token(token_file)
        with _tcp(server.address) as raw:
            refused = set()
            for rid, argument in enumerate(
                [
                    str(second),  # no token
                    with_signature(str(second), "0" * 64),  # a signature without a challenge
                    str(secret_dir / "exists.pt"),
                    str(secret_dir / "missing.pt"),
                ],
                start=1,
            ):
                frame = encode_control_request(rid, ControlOp.LOAD_MODEL, 0, argument)
                reply = _raw_request(raw, frame)
                assert reply.status == Status.UNAUTHORIZED
                refused.add(reply.message)
            assert len(refused) == 1 and str(tmp_path) not in refused.pop()
            # With the token: an existing bad file and a missing one get the same answer.
            failed = set()
            for rid, path in [(10, secret_dir / "exists.pt"), (11, secret_dir / "missing.pt")]:
                frame = _signed_load(raw, rid, str(path), token)
                reply = _raw_request(raw, frame)
                assert reply.status == Status.LOAD_FAILED
                failed.add(reply.message)
            assert len(failed) == 1 and "secret" not in failed.pop()
            # Nothing above changed the model; the owner's token does.
            ok = _raw_request(raw, encode_eval_request(20, 0, FEATURE_SCHEMA_ID, features, legal))
            np.testing.assert_allclose(ok.values, expected(1, features, legal).values, atol=1e-5)
            frame = _signed_load(raw, 21, str(second), token)
            assert _raw_request(raw, frame).ok
            ok = _raw_request(raw, encode_eval_request(22, 0, FEATURE_SCHEMA_ID, features, legal))
            np.testing.assert_allclose(ok.values, expected(2, features, legal).values, atol=1e-5)
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- item 2
def test_non_finite_features_get_an_error_status_not_nan_values(tmp_path) -> None:
    server = start_server("--model", "dummy", "--bind", f"unix://{tmp_path}/s.sock")
    features, legal = random_batch(np.random.default_rng(2), 4)
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(f"{tmp_path}/s.sock")
            for bad_value in (np.nan, np.inf):
                bad = features.copy()
                bad[2, 5] = bad_value
                reply = _raw_request(raw, encode_eval_request(1, 0, FEATURE_SCHEMA_ID, bad, legal))
                assert reply.status == Status.NON_FINITE and "row 2" in reply.message
            assert _raw_request(
                raw, encode_eval_request(2, 0, FEATURE_SCHEMA_ID, features, legal)
            ).ok
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- item 3
class _InProcessServer:
    """An InferenceServer on its own event-loop thread, so a test can look at its buffers."""

    def __init__(
        self, settings: ServerSettings, path: str, models: dict[int, ServedModel] | None = None
    ) -> None:
        """``path``: a Unix socket path, or a ``tcp://`` address; ``models``: default a small
        schema-1 net as model 0."""
        if models is None:
            net = build_net(hidden=32, blocks=1, margin_head=True, seed=1)
            models = {0: ServedModel(net, FEATURE_SCHEMA_ID, "seed 1")}
        self.server = InferenceServer(models, settings)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        address = path if path.startswith("tcp://") else f"unix://{path}"
        self.address = self.call(self.server.start(parse_endpoint(address)))

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def stats(self) -> tuple[list[dict[str, int]], int]:
        async def snapshot():
            return self.server.connection_stats(), self.server.queued_requests()

        return self.call(snapshot())

    def close(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)
        self.loop.close()


def test_client_that_never_reads_is_bounded_and_freed_when_it_leaves(tmp_path) -> None:
    max_pending, max_unsent = 16, 256 * 1024
    settings = ServerSettings(
        max_batch=64, max_wait_us=100, max_pending_per_connection=max_pending,
        max_unsent_bytes=max_unsent,
    )  # fmt: skip
    server = _InProcessServer(settings, str(tmp_path / "h.sock"))
    rows = 64
    features, legal = random_batch(np.random.default_rng(3), rows)
    frame = encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal)
    reply_bytes = 4 + 24 + 4 * rows * (47 + 2)
    n_frames = 3000  # ~72 MB of requests, ~38 MB of replies if the server took them all
    sent = [0]
    hostile = socket.socket(socket.AF_UNIX)
    hostile.connect(str(tmp_path / "h.sock"))

    def flood() -> None:
        try:
            for _ in range(n_frames):
                hostile.sendall(frame)
                sent[0] += 1
        except OSError:
            pass  # we close the socket under it at the end

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    try:
        # The server fills this connection's reply buffer to its bound, then stops reading.
        _wait_for(
            lambda: any(c["unsent_bytes"] >= max_unsent // 2 for c in server.stats()[0]),
            what="the never-reading client's replies to pile up",
        )
        with client_for(server.address) as client:  # others are still served, correctly
            for seed in range(20):
                f, lg = random_batch(np.random.default_rng(100 + seed), 5)
                np.testing.assert_allclose(
                    client.evaluate(f, lg)[1], expected(1, f, lg).values, atol=1e-5
                )
            conns, queued = server.stats()
            assert len(conns) == 2
            for conn in conns:
                assert conn["pending"] <= max_pending
                assert conn["unsent_bytes"] <= max_unsent + max_pending * reply_bytes
            assert queued <= max_pending
            assert sender.is_alive() and sent[0] < n_frames  # its sends block in the kernel
            hostile.shutdown(socket.SHUT_RDWR)
            hostile.close()
            sender.join(timeout=60)
            # Everything it held is released once it is gone.
            _wait_for(lambda: len(server.stats()[0]) == 1, what="the connection to be dropped")
            assert server.stats() == ([{"pending": 0, "unsent_bytes": 0, "held_bytes": 0}], 0)
            f, lg = random_batch(np.random.default_rng(7), 2)
            np.testing.assert_allclose(
                client.evaluate(f, lg)[1], expected(1, f, lg).values, atol=1e-5
            )
    finally:
        hostile.close()
        server.close()
