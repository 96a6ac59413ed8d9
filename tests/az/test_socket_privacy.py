"""Unix sockets and the admin token (issue 28 items 1, 10 and 12's log half): default sockets
live in a private directory, a client sends nothing to a socket another user serves and signs a
challenge with the token (never sending it) only where the server asks for it,
``--admin-token-file`` makes a Unix socket need the token, and refused admin attempts cannot
flood the log."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from leaguezero.az.inference import endpoint as endpoint_mod
from leaguezero.az.inference.admin import (
    admin_signature,
    load_or_create_token,
    split_signature,
    with_signature,
)
from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.endpoint import (
    BindError,
    UntrustedSocketError,
    bind_unix_owner_only,
    parse_endpoint,
    runtime_dir,
)
from leaguezero.az.inference.lanes import RateLimitedLog
from leaguezero.az.inference.protocol import (
    LENGTH,
    ControlOp,
    ControlRequest,
    Status,
    decode_request,
    encode_control_request,
    encode_error,
)
from leaguezero.az.inference.replies import text_reply
from leaguezero.az.inference.server import ServerSettings
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from tests.az.test_server import make_checkpoint, start_server
from tests.az.test_server_hostile import (
    _InProcessServer,
    _raw_request,
    _signed_load,
    _tcp,
    _wait_for,
)

TOKEN = "ab" * 32


# ---------------------------------------------------------------------------- private directory
def test_bare_unix_name_lives_in_a_private_runtime_directory(tmp_path, monkeypatch) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert parse_endpoint("unix://y.sock").path == str(xdg / "leaguezero" / "y.sock")
    sock = bind_unix_owner_only(parse_endpoint("unix://y.sock").path)
    try:
        assert stat.S_IMODE(os.stat(xdg / "leaguezero").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(xdg / "leaguezero" / "y.sock").st_mode) == 0o600
    finally:
        sock.close()
    # An XDG_RUNTIME_DIR that others can use is not trusted: ~/.leaguezero/run instead.
    xdg.chmod(0o777)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert runtime_dir() == tmp_path / "home" / ".leaguezero" / "run"
    # A runtime directory others can write to is refused, not used.
    run = runtime_dir()
    run.mkdir(parents=True, mode=0o700)
    run.chmod(0o777)
    with pytest.raises(BindError, match="can be used by other users"):
        bind_unix_owner_only(str(run / "y.sock"))
    # The default bind of every config is such a bare name (no fixed path in /tmp).
    from leaguezero.yatzy.config import YatzyConfig

    assert YatzyConfig().infer.bind == "unix://yatzy.sock"


# ---------------------------------------------------------------------------- foreign sockets
class _Recorder:
    """A raw Unix or TCP server in a thread that records every request it reads and answers
    control requests: a fresh nonce for each CHALLENGE, LOAD_MODEL without a signature refused
    when ``needs_token``."""

    def __init__(self, listener: socket.socket, needs_token: bool = False) -> None:
        self.listener = listener
        self.needs_token = needs_token
        self.received: list[bytes] = []  # raw bytes per connection
        self.arguments: list[str] = []  # LOAD_MODEL arguments, in order
        self.nonces: list[bytes] = []  # the challenges it gave, in order
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        index = len(self.received)
        self.received.append(b"")
        try:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                self.received[index] += head
                if len(head) < 4:
                    return
                (length,) = LENGTH.unpack(head)
                body = conn.recv(length, socket.MSG_WAITALL)
                self.received[index] += body
                request = decode_request(body)
                assert isinstance(request, ControlRequest)
                if request.op == ControlOp.CHALLENGE:
                    self.nonces.append(os.urandom(32))
                    nonce = json.dumps({"nonce": self.nonces[-1].hex()})
                    conn.sendall(text_reply(request.request_id, nonce))
                    continue
                if request.op == ControlOp.LOAD_MODEL:
                    self.arguments.append(request.argument)
                    signature, _ = split_signature(request.argument)
                    if self.needs_token and signature is None:
                        conn.sendall(encode_error(request.request_id, Status.UNAUTHORIZED, "token"))
                        continue
                conn.sendall(text_reply(request.request_id, '{"0": {}}'))
        except OSError:
            return

    def drop_connections(self) -> None:
        # Take the list first: the client reconnects at once, and a connection accepted while
        # this loop ran must not be dropped too (a second replay, signing another nonce).
        with self.lock:
            conns, self.conns = self.conns, []
        for conn in conns:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.listener.close()
        self.drop_connections()


def _client(address: str) -> InferenceClient:
    return InferenceClient(
        address,
        feature_schema_id=FEATURE_SCHEMA_ID,
        num_actions=NUM_ACTIONS,
        connect_timeout_s=60,
        health_interval_s=None,
    )


def test_client_sends_nothing_to_a_socket_another_user_serves(tmp_path, monkeypatch) -> None:
    path = tmp_path / "other.sock"
    listener = bind_unix_owner_only(str(path))
    listener.listen()
    recorder = _Recorder(listener)
    me = os.getuid()
    # The socket's server process runs as this uid; seen from a different user it is foreign.
    monkeypatch.setattr(endpoint_mod.os, "getuid", lambda: me + 1)
    try:
        started = time.monotonic()
        with pytest.raises(UntrustedSocketError, match="served by another user"):
            _client(f"unix://{path}")
        assert time.monotonic() - started < 30  # at once, not after the connect timeout
        _wait_for(lambda: len(recorder.received) == 1, what="the connection attempt")
        monkeypatch.undo()
        for conn in recorder.conns:  # the client closed it without a byte
            assert conn.recv(1) == b""
        assert recorder.received == [b""]
    finally:
        recorder.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a server as another user")
def test_real_other_user_socket_is_refused_by_client_and_server() -> None:
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="lz-shared-"))  # a shared directory, as /tmp is
    shared.chmod(0o777)
    path = shared / "trap.sock"
    code = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666)\n"
        "s.listen(); print('ready', flush=True)\n"
        "c, _ = s.accept(); data = c.recv(1 << 20)\n"
        "print('got', len(data), flush=True)\n"
    )
    trap = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert trap.stdout.readline().strip() == "ready"
        with pytest.raises(UntrustedSocketError, match="uid 65534"):
            _client(f"unix://{path}")
        assert trap.stdout.readline().strip() == "got 0"  # nothing was sent to it
        trap.wait(timeout=60)
        # A server refuses to take over a socket path another user owns.
        with pytest.raises(BindError, match="belongs to another user"):
            bind_unix_owner_only(str(path))
    finally:
        trap.kill()
        trap.wait(timeout=60)
        shutil.rmtree(shared, ignore_errors=True)


# ---------------------------------------------------------------------------- the token
@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_token_goes_only_where_the_server_asks_for_it(tmp_path, transport) -> None:
    for needs_token in (False, True):
        if transport == "unix":
            path = tmp_path / f"t{int(needs_token)}.sock"
            listener, address = bind_unix_owner_only(str(path)), f"unix://{path}"
        else:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        listener.listen()
        recorder = _Recorder(listener, needs_token)
        try:
            with _client(address) as client:
                client.load_model(0, "/x.pt", admin_token=TOKEN)

                def signed(i: int, r: _Recorder = recorder) -> str:
                    return with_signature("/x.pt", admin_signature(TOKEN, r.nonces[i], 0, "/x.pt"))

                def expected(i: int, needs: bool = needs_token) -> list[str]:
                    if transport == "tcp":  # TCP: always signed, once
                        return [signed(i)]
                    if needs:  # Unix: unsigned, then signed after UNAUTHORIZED
                        return ["/x.pt", signed(i)]
                    return ["/x.pt"]  # Unix, a server that does not need it: never signed

                assert recorder.arguments == expected(0)
                # A reconnect replays the load the same way, signing a fresh challenge.
                recorder.drop_connections()
                replayed = 2 * len(expected(0))
                _wait_for(lambda r=recorder, n=replayed: len(r.arguments) == n, what="replay")
                assert recorder.arguments == expected(0) + expected(1)
                # The token itself never went out, in any form the recorder could read.
                sent = b"".join(recorder.received)
                assert TOKEN.encode() not in sent and bytes.fromhex(TOKEN) not in sent
        finally:
            recorder.close()


def test_unix_server_with_admin_token_file_needs_the_token(tmp_path) -> None:
    ckpt = make_checkpoint(tmp_path / "m.pt", 1)
    token_file = tmp_path / "token"
    path = tmp_path / "a.sock"
    server = start_server(
        "--model", str(ckpt), "--bind", f"unix://{path}", "--metrics-port", "-1",
        "--admin-token-file", str(token_file),
    )  # fmt: skip
    try:
        token = token_file.read_text().strip()
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(path))
            refused = _raw_request(
                raw, encode_control_request(1, ControlOp.LOAD_MODEL, 0, str(ckpt))
            )
            assert refused.status == Status.UNAUTHORIZED
            ok = _raw_request(raw, _signed_load(raw, 2, str(ckpt), token))
            assert ok.ok
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-load", "--bind"]
        cli = subprocess.run(
            [*cmd, f"unix://{path}", "--model", f"0={ckpt}", "--token-file", str(token_file)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        wrong = tmp_path / "wrong"
        load_or_create_token(wrong)
        cli = subprocess.run(
            [*cmd, f"unix://{path}", "--model", f"0={ckpt}", "--token-file", str(wrong)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert cli.returncode != 0 and "UNAUTHORIZED" in cli.stderr
        assert "Traceback" not in cli.stderr
    finally:
        assert server.stop(signal.SIGINT) == 0
    # Without --admin-token-file the owner-only Unix socket needs no token (as before).
    server = start_server("--model", str(ckpt), "--bind", f"unix://{path}", "--metrics-port", "-1")
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(path))
            assert _raw_request(
                raw, encode_control_request(1, ControlOp.LOAD_MODEL, 0, str(ckpt))
            ).ok
    finally:
        assert server.stop(signal.SIGINT) == 0


# ---------------------------------------------------------------------------- log flood
def test_rate_limited_log_counts_what_it_left_out(caplog) -> None:
    now = [0.0]
    limited = RateLimitedLog(interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="leaguezero.az.inference.server"):
        assert limited.warning("refused %s", "a")
        for _ in range(99):
            now[0] += 0.05
            assert not limited.warning("refused %s", "b")
        now[0] = 20.0
        assert limited.warning("refused %s", "c")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused a", "refused c (99 more like this in the last 20 s)"]


def test_refused_admin_attempts_do_not_flood_the_log(tmp_path, caplog) -> None:
    server = _InProcessServer(ServerSettings(admin_token=TOKEN), "tcp://127.0.0.1:0")
    try:
        address = server.address
        with caplog.at_level(logging.WARNING, logger="leaguezero.az.inference.server"):
            started = time.monotonic()
            with _tcp(address) as raw:
                for rid in range(1, 201):
                    frame = encode_control_request(
                        rid, ControlOp.LOAD_MODEL, 0, with_signature("/x.pt", "0" * 64)
                    )
                    assert _raw_request(raw, frame).status == Status.UNAUTHORIZED
            elapsed = time.monotonic() - started
        refused = [r for r in caplog.records if "refused LOAD_MODEL" in r.getMessage()]
        assert 1 <= len(refused) <= 1 + int(elapsed / 10) + 1, (len(refused), elapsed)
    finally:
        server.close()
