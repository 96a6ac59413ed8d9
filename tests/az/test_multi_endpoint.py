"""One client, two real `yz infer-server` processes over loopback TCP: load spreading, failover
when one is killed mid-run (no request lost, every reply right), and reconnecting to it."""

from __future__ import annotations

import signal
import socket
import time

import numpy as np

from leaguezero.az.inference.admin import read_token
from tests.az.test_server import client_for, expected, make_checkpoint, random_batch, start_server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_args(model, port: int) -> list[str]:
    # A long max_wait (2 s) holds requests in the server's queue, so some are surely in flight
    # at the kill, however slow a loaded machine is.
    return ["--model", str(model), "--bind", f"tcp://127.0.0.1:{port}",
            "--set", "infer.max_wait_us=2000000", "--set", "infer.max_batch=100000",
            "--set", "infer.eager_flush=false"]  # fmt: skip


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_spread_failover_and_recovery_lose_no_request(tmp_path) -> None:
    good = make_checkpoint(tmp_path / "good.pt", 1)
    other = make_checkpoint(tmp_path / "other.pt", 2)
    ports = [_free_port(), _free_port()]
    servers = [start_server(*_server_args(good, port)) for port in ports]
    address = ",".join(s.address for s in servers)
    rng = np.random.default_rng(11)
    batches = [random_batch(rng, 3) for _ in range(900)]
    # A generous health timeout: a loaded machine must not fail over a live server.
    client = client_for(address, health_interval_s=0.5, health_timeout_s=30.0)
    try:
        # The client returns once *one* server is up; the second connects in the background
        # (the old assert here raced that connection: 1 failure in 7 runs).
        _wait_for(lambda: all(s["up"] for s in client.endpoint_status()))
        # remembered: a recovered server must serve it too (TCP: an admin op needs the token)
        client.load_model(0, str(good), admin_token=read_token())
        futures = [client.submit(f, legal) for f, legal in batches[:300]]
        before = client.endpoint_status()  # no sleep: the replies are held for 2 s
        assert before[0]["pending_rows"] > 0 and before[1]["pending_rows"] > 0  # both used
        assert servers[1].stop(signal.SIGKILL) == -signal.SIGKILL  # dies with work in flight
        futures += [client.submit(f, legal) for f, legal in batches[300:600]]
        _wait_for(lambda: not client.endpoint_status()[1]["up"])
        for fut in futures:
            fut.result(timeout=120)
        assert client.stats.resent > 0 and client.endpoint_status()[1]["failovers"] >= 1

        # The recovered server starts with another model; the client reloads the run's model
        # before sending it traffic.
        servers[1] = start_server(*_server_args(other, ports[1]))
        _wait_for(lambda: client.endpoint_status()[1]["up"])
        replies_b = client.endpoint_status()[1]["replies"]
        futures += [client.submit(f, legal) for f, legal in batches[600:]]
        for fut, (features, legal) in zip(futures, batches, strict=True):
            want = expected(1, features, legal)
            np.testing.assert_allclose(fut.result(timeout=120).values, want.values, atol=1e-5)
        assert client.endpoint_status()[1]["replies"] > replies_b  # traffic came back to it
        assert client.stats.requests == len(batches) and client.pending_rows == 0
    finally:
        client.close()
        for server in servers:
            server.stop()


def test_client_starts_with_one_of_two_servers_down(tmp_path) -> None:
    good = make_checkpoint(tmp_path / "good.pt", 1)
    server = start_server(*_server_args(good, _free_port()))
    dead = f"tcp://127.0.0.1:{_free_port()}"
    rng = np.random.default_rng(3)
    try:
        with client_for(f"{dead},{server.address}", connect_timeout_s=30) as client:
            assert [s["up"] for s in client.endpoint_status()] == [False, True]
            features, legal = random_batch(rng, 4)
            priors, values = client.evaluate(features, legal)
            np.testing.assert_allclose(priors.sum(axis=1), 1.0, rtol=1e-5)
            np.testing.assert_allclose(values, expected(1, features, legal).values, atol=1e-5)
    finally:
        server.stop()
