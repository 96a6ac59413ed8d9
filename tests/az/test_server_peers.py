"""Idle connections, peers, unread replies and outages (issue 54 items 2 and 9).

Silent connections never lock a client out: they give way to newcomers and are closed at the
handshake deadline; caps count per peer; a connection that does not read its replies gets no
more compute until it reads; position rows with no legal action are refused; and a client logs
an outage once and backs off, also when the server answers BUSY."""

from __future__ import annotations

import logging
import os
import pwd
import socket
import threading

import numpy as np
import pytest

from leaguezero.az.inference.peers import PeerTable, peer_of
from leaguezero.az.inference.protocol import (
    LENGTH,
    ControlOp,
    Status,
    decode_reply,
    encode_control_request,
    encode_eval_request,
    encode_position_request,
)
from leaguezero.az.inference.server import ServedModel, ServerSettings
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.game.positions import POSITION_SCHEMA_ID, pov_position_codec
from leaguezero.yatzy.net.networks import build_net
from tests.az.test_server import client_for, expected, random_batch
from tests.az.test_server_hostile import _InProcessServer, _raw_request, _wait_for


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset), reading and dropping what it sent."""
    sock.settimeout(60)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


# ---------------------------------------------------------------------------- silent peers
def test_silent_connections_of_one_peer_never_lock_a_client_out(tmp_path) -> None:
    """130 connections that say nothing, from this user (the client's own peer), against the
    default caps (128, 64 per peer): each newcomer makes a silent one give way, so the normal
    client is served. The handshake deadline is set far off: it is not what lets it in."""
    settings = ServerSettings(handshake_timeout_s=3600.0)
    server = _InProcessServer(settings, "tcp://127.0.0.1:0")
    host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=60) for _ in range(130)]
    try:
        _wait_for(lambda: len(server.stats()[0]) == 64, what="the peer's share to be full")
        with client_for(server.address, connect_timeout_s=120, health_interval_s=None) as client:
            features, legal = random_batch(np.random.default_rng(1), 4)
            values = client.evaluate(features, legal)[1]
            np.testing.assert_allclose(values, expected(1, features, legal).values, atol=1e-5)
            peers = server.call(_peer_stats(server))
            assert peers == {f"uid:{os.getuid()}": 64}  # loopback TCP: counted as this user
            # A second client gets in too, and the first keeps being served.
            with client_for(server.address, health_interval_s=None) as second:
                assert second.evaluate(features, legal)[1].shape == (4,)
            assert client.evaluate(features, legal)[1].shape == (4,)
    finally:
        for sock in idle:
            sock.close()
        server.close()


async def _peer_stats(server: _InProcessServer) -> dict[str, int]:
    return server.server.peer_stats()


def test_the_handshake_deadline_closes_silent_connections_only(tmp_path) -> None:
    """A short deadline (the test asserts who was closed, not when)."""
    server = _InProcessServer(ServerSettings(handshake_timeout_s=0.2), str(tmp_path / "d.sock"))
    path = str(tmp_path / "d.sock")
    silent = []
    for _ in range(5):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        silent.append(sock)
    partial = socket.socket(socket.AF_UNIX)  # a frame begun and never finished
    partial.connect(path)
    partial.sendall(LENGTH.pack(1000) + b"x" * 10)
    talker = socket.socket(socket.AF_UNIX)
    talker.connect(path)
    try:
        assert _raw_request(talker, encode_control_request(1, ControlOp.INFO, 0)).ok
        for sock in [*silent, partial]:
            assert _closed_by_server(sock)
        _wait_for(lambda: len(server.stats()[0]) == 1, what="only the talker to remain")
        features, legal = random_batch(np.random.default_rng(2), 3)
        reply = _raw_request(talker, encode_eval_request(2, 0, FEATURE_SCHEMA_ID, features, legal))
        assert reply.ok and reply.values.shape == (3,)
    finally:
        for sock in [*silent, partial, talker]:
            sock.close()
        server.close()


class _Conn:
    def __init__(self, peer: str, proven: bool, last_frame: float) -> None:
        self.peer, self.proven, self.last_frame = peer, proven, last_frame


def test_the_peer_table_keeps_one_peer_from_locking_others_out() -> None:
    table = PeerTable(max_connections=6, max_per_peer=4)
    a = [_Conn("addr:10.0.0.1", True, float(i)) for i in range(4)]
    for conn in a:
        assert table.admit(conn) == []
        table.add(conn)
    assert table.admit(_Conn("addr:10.0.0.1", True, 9.0)) is None  # at its own cap, all proven
    silent_b = _Conn("addr:10.0.0.2", False, 5.0)
    table.add(silent_b)
    table.add(_Conn("addr:10.0.0.2", True, 6.0))
    # Full (6): a newcomer of a third peer makes the silent connection give way first...
    assert table.admit(_Conn("addr:10.0.0.3", False, 7.0)) == [silent_b]
    table.discard(silent_b)
    table.add(_Conn("addr:10.0.0.3", True, 7.0))
    # ...then the largest peer's longest-silent connection, while it holds more than the
    # newcomer's peer would.
    assert table.admit(_Conn("addr:10.0.0.4", False, 8.0)) == [a[0]]
    table.discard(a[0])
    table.add(_Conn("addr:10.0.0.4", True, 8.0))
    assert table.peers() == {
        "addr:10.0.0.1": 3, "addr:10.0.0.2": 1, "addr:10.0.0.3": 1, "addr:10.0.0.4": 1
    }  # fmt: skip
    # The largest peer cannot push the others out, though under its own cap.
    assert table.admit(_Conn("addr:10.0.0.1", False, 9.0)) is None
    for conn in a[1:]:
        table.discard(conn)
    assert table.count == 3 and table.admit(_Conn("addr:10.0.0.1", False, 9.0)) == []


def _hold_as(uid: int, host: str, port: int, count: int) -> tuple[int, int]:
    """Fork a process that becomes ``uid`` and holds ``count`` TCP connections that said hello
    (INFO) and went idle; returns (pid, write end of a pipe: close it to end the process) once
    they are all answered. The child touches only sockets and os (the parent has threads)."""
    frames = [encode_control_request(i + 1, ControlOp.INFO, 0) for i in range(count)]
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no logging, only sockets
        status = 1
        try:
            os.close(ready_r)
            os.close(stop_w)
            os.setgid(uid)
            os.setuid(uid)
            held = []
            for frame in frames:
                sock = socket.socket(socket.AF_INET)  # no getaddrinfo: no codec to import
                sock.settimeout(60)
                sock.connect((host, port))
                sock.sendall(frame)
                (length,) = LENGTH.unpack(sock.recv(4, socket.MSG_WAITALL))
                sock.recv(length, socket.MSG_WAITALL)
                held.append(sock)
            os.write(ready_w, b"k")
            os.read(stop_r, 1)  # until the parent closes its end
            status = 0
        except BaseException as err:  # said on stderr: the parent's assertion names no cause
            os.write(2, f"holder as uid {uid} failed: {err!r}\n".encode())
        finally:
            os._exit(status)
    os.close(ready_w)
    os.close(stop_r)
    got = os.read(ready_r, 1)
    os.close(ready_r)
    assert got == b"k", "the other user's connections did not get their hello answered"
    return pid, stop_w


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another user")
def test_another_users_idle_connections_over_loopback_tcp_lock_nobody_out() -> None:
    """Another local user (nobody) holds its whole per-peer share with connections that said
    hello and went idle: it is its own peer (not 127.0.0.1's), so this user's clients get in,
    and past the global cap its connections give way to this user's."""
    settings = ServerSettings(max_connections=4, max_connections_per_peer=3)
    server = _InProcessServer(settings, "tcp://127.0.0.1:0")
    host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
    nobody = pwd.getpwnam("nobody").pw_uid
    pid, stop = _hold_as(nobody, host, int(port), 3)
    try:
        assert server.call(_peer_stats(server)) == {f"uid:{nobody}": 3}
        features, legal = random_batch(np.random.default_rng(6), 4)
        with client_for(server.address, health_interval_s=None) as first:
            assert first.evaluate(features, legal)[1].shape == (4,)
            with client_for(server.address, health_interval_s=None) as second:
                # Full (4): the peer with 3 gave one up for this user's second connection.
                assert second.evaluate(features, legal)[1].shape == (4,)
                peers = server.call(_peer_stats(server))
                assert peers == {f"uid:{nobody}": 2, f"uid:{os.getuid()}": 2}
            assert first.evaluate(features, legal)[1].shape == (4,)
    finally:
        os.close(stop)
        os.waitpid(pid, 0)
        server.close()


def test_a_unix_peer_is_its_user() -> None:
    left, right = socket.socketpair()
    with left, right:
        assert peer_of(left) == f"uid:{os.getuid()}"


# ---------------------------------------------------------------------------- unread replies
def test_a_connection_that_does_not_read_gets_no_compute_until_it_reads(tmp_path) -> None:
    bound = 64 * 1024
    settings = ServerSettings(max_batch=64, max_wait_us=100, max_unsent_bytes=bound)
    server = _InProcessServer(settings, str(tmp_path / "u.sock"))
    rows, n_frames = 64, 300  # ~3.7 MB of replies: far past the bound and the kernel's buffers
    features, legal = random_batch(np.random.default_rng(3), rows)
    frames = [
        encode_eval_request(i + 1, 0, FEATURE_SCHEMA_ID, features, legal) for i in range(n_frames)
    ]
    hostile = socket.socket(socket.AF_UNIX)
    hostile.connect(str(tmp_path / "u.sock"))
    sender = threading.Thread(target=lambda: [hostile.sendall(f) for f in frames], daemon=True)
    sender.start()
    try:

        def hostile_stats():
            conns = server.stats()[0]
            return max(conns, key=lambda c: c["unsent_bytes"]) if conns else None

        _wait_for(
            lambda: (s := hostile_stats()) is not None and s["unsent_bytes"] > bound
            and s["pending"] > 0,
            what="the never-reading connection to pass the unread bound with frames queued",
        )  # fmt: skip
        before = hostile_stats()
        with client_for(server.address, health_interval_s=None) as client:
            for seed in range(20):  # the batcher runs 20 times meanwhile
                f, lg = random_batch(np.random.default_rng(100 + seed), 4)
                np.testing.assert_allclose(
                    client.evaluate(f, lg)[1], expected(1, f, lg).values, atol=1e-5
                )
            conns = server.stats()[0]
            hostile_now = max(conns, key=lambda c: c["unsent_bytes"])
            assert hostile_now["pending"] == before["pending"] > 0  # nothing computed for it
            assert hostile_now["unsent_bytes"] == before["unsent_bytes"]
        # Once it reads, it is served to the end, every reply in order of its requests.
        got = []
        hostile.settimeout(120)
        while len(got) < n_frames:
            (length,) = LENGTH.unpack(hostile.recv(4, socket.MSG_WAITALL))
            reply = decode_reply(hostile.recv(length, socket.MSG_WAITALL))
            assert reply.ok, reply.message
            got.append(reply.request_id)
        assert sorted(got) == list(range(1, n_frames + 1))
        sender.join(timeout=60)
    finally:
        hostile.close()
        server.close()


# ---------------------------------------------------------------------------- item 9
def test_position_rows_with_no_legal_action_are_refused_not_answered_minus_inf(tmp_path) -> None:
    net = build_net(hidden=32, blocks=1, margin_head=True, seed=5)
    served = ServedModel(net, FEATURE_SCHEMA_ID, "puct", positions=pov_position_codec())
    server = _InProcessServer(ServerSettings(), str(tmp_path / "p.sock"), {0: served})
    rows = np.zeros((3, 9), np.int32)
    rows[:, 0] = rows[:, 1] = 5  # two categories open for both players: legal actions
    rows[2, :2] = 0  # a finished game: no category left, nothing to do
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(tmp_path / "p.sock"))
            frame = encode_position_request(1, 0, FEATURE_SCHEMA_ID, POSITION_SCHEMA_ID, rows, 47)
            reply = _raw_request(raw, frame)
            assert reply.status == Status.MALFORMED
            assert "row 2 has no legal action" in reply.message and "\n" not in reply.message
            # Its value is still served, and rows with a legal action get finite logits.
            values = encode_position_request(2, 0, FEATURE_SCHEMA_ID, POSITION_SCHEMA_ID, rows, 0)
            assert _raw_request(raw, values).ok
            ok = encode_position_request(3, 0, FEATURE_SCHEMA_ID, POSITION_SCHEMA_ID, rows[:2], 47)
            reply = _raw_request(raw, ok)
            assert reply.ok and np.isfinite(reply.logits).any(axis=1).all()
    finally:
        server.close()


# ---------------------------------------------------------------------------- client outages
def test_the_client_logs_an_outage_once_and_backs_off_while_refused(tmp_path, caplog) -> None:
    """The server goes away, and comes back full (BUSY to this client) for a while: one warning
    for the whole outage, however many attempts, and the attempts back off."""
    path = str(tmp_path / "o.sock")
    server = _InProcessServer(ServerSettings(), path)
    holder = None
    with caplog.at_level(logging.INFO, logger="leaguezero.az.inference.client"):
        client = client_for(f"unix://{path}", health_interval_s=None, reconnect_timeout_s=600)
        try:
            features, legal = random_batch(np.random.default_rng(4), 4)
            client.evaluate(features, legal)
            server.close()
            # Back, but full: one proven connection holds its only slot. The server starts on
            # another name and takes the client's only after the holder is in, so the client's
            # reconnects (which go on meanwhile) cannot take the slot first on a busy machine.
            settings = ServerSettings(max_connections=1, max_connections_per_peer=1)
            server = _InProcessServer(settings, path + ".new")
            holder = socket.socket(socket.AF_UNIX)
            holder.connect(path + ".new")
            assert _raw_request(holder, encode_control_request(1, ControlOp.INFO, 0)).ok
            os.rename(path + ".new", path)  # a listening socket keeps listening under a new name
            waiting = [client.submit(features, legal) for _ in range(5)]
            link = client.links[0]
            _wait_for(lambda: link.failures >= 6, what="the client to retry a few times")
            attempts = link.failures
            assert not any(w.done() for w in waiting)
            down = [r for r in caplog.records if "is down" in r.getMessage()]
            assert len(down) == 1 and down[0].levelno == logging.WARNING
            holder.close()  # room again: the waiting requests are served
            for w in waiting:
                np.testing.assert_allclose(
                    w.result(timeout=120).values, expected(1, features, legal).values, atol=1e-5
                )
            assert link.failures == 0
        finally:
            client.close()
            if holder is not None:
                holder.close()
            server.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("is down" in line for line in lines) == 1, lines
    assert sum("answers again" in r.getMessage() for r in caplog.records) == 1
    # Exponential: 6 attempts take at least 0.02 * (1 + 2 + 4 + 8 + 16) / 2 s; before, the
    # client reconnected as fast as the server refused it.
    assert attempts >= 6


def test_an_idle_client_outlives_the_handshake_deadline(tmp_path) -> None:
    """The hello is one INFO request: a client that connects and stays idle is not closed at
    the handshake deadline (it said something)."""
    server = _InProcessServer(ServerSettings(handshake_timeout_s=0.2), str(tmp_path / "h.sock"))
    try:
        with client_for(server.address, health_interval_s=None) as client:
            sock = socket.socket(socket.AF_UNIX)  # a silent one, closed at the deadline
            sock.connect(str(tmp_path / "h.sock"))
            assert _closed_by_server(sock)
            sock.close()
            assert len(server.stats()[0]) == 1  # the idle client's connection is still open
            assert client.stats.reconnects == 0
            features, legal = random_batch(np.random.default_rng(5), 2)
            assert client.evaluate(features, legal)[1].shape == (2,)
    finally:
        server.close()
