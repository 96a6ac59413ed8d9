"""Fairness and a global memory bound in the inference server (issue 28 item 6): batches are
formed round-robin over connections, so a client with a thousand frames queued cannot delay
another's request by its backlog; and never-reading clients together hold at most
``max_held_bytes`` (plus one frame and one batch of replies) before the largest is closed."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np

from leaguezero.az.inference.lanes import FairQueue, Pending
from leaguezero.az.inference.protocol import encode_eval_request
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from tests.az.test_server import client_for, expected, make_checkpoint, random_batch, start_server


class _FakeRequest:
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _FakeConnection:
    def __init__(self, peer: str = "") -> None:
        self.peer = peer or f"peer-{id(self)}"  # default: each its own peer


def _pending(conn: object, rows: int, tag: str) -> Pending:
    p = Pending(_FakeRequest(rows), conn, 0.0, rows)  # type: ignore[arg-type]
    p.tag = tag  # type: ignore[attr-defined]
    return p


def test_batches_are_formed_round_robin_over_connections() -> None:
    async def build() -> FairQueue:
        return FairQueue()

    queue = asyncio.run(build())
    flooders = [_FakeConnection() for _ in range(3)]
    for i in range(1000):
        for n, conn in enumerate(flooders):
            queue.push(_pending(conn, 256, f"f{n}.{i}"))
    polite = _FakeConnection()
    queue.push(_pending(polite, 4, "polite"))
    tags = []
    for _ in range(4):
        batch, rows = queue.take_batch(256)
        assert rows == sum(p.request.rows for p in batch) <= 256
        tags.append([p.tag for p in batch])
    # One frame of each flooder ahead of it, then the polite request: never behind a backlog.
    assert tags == [["f0.0"], ["f1.0"], ["f2.0"], ["polite"]]
    # Small frames of several connections share a batch, in turn.
    small = [_FakeConnection(), _FakeConnection()]
    for i in range(3):
        for n, conn in enumerate(small):
            queue.push(_pending(conn, 4, f"s{n}.{i}"))
    queue.drop(flooders[0])
    queue.drop(flooders[1])
    queue.drop(flooders[2])
    batch, rows = queue.take_batch(16)
    assert [p.tag for p in batch] == ["s0.0", "s1.0", "s0.1", "s1.1"] and rows == 16
    assert queue.count == 2 and queue.rows == 8


def test_batches_are_fair_between_peers_not_connections() -> None:
    """One peer's 16 connections share one peer's turn; a connection ``blocked`` (its unread
    replies over the bound) keeps its frames queued and its place."""

    async def build() -> FairQueue:
        return FairQueue()

    queue = asyncio.run(build())
    many = [_FakeConnection("uid:1000") for _ in range(16)]
    for i in range(100):
        for n, conn in enumerate(many):
            queue.push(_pending(conn, 256, f"m{n}.{i}"))
    other = _FakeConnection("uid:1001")
    for i in range(3):
        queue.push(_pending(other, 256, f"o{i}"))
    tags = [queue.take_batch(256)[0][0].tag for _ in range(6)]
    assert tags == ["m0.0", "o0", "m1.0", "o1", "m2.0", "o2"]
    blocked = {many[3], many[4]}
    batch, rows = queue.take_batch(256 * 3, blocked.__contains__)
    assert [p.tag for p in batch] == ["m5.0", "m6.0", "m7.0"] and rows == 768
    assert queue.ready(blocked.__contains__)
    assert not queue.ready(lambda conn: True) and queue.count == 16 * 100 + 3 - 9
    assert queue.oldest_arrival(lambda conn: True) == float("inf")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_flood_of_never_reading_clients_is_bounded_and_fair(tmp_path) -> None:
    """16 clients that never read, each sending up to 1,024 frames of 256 rows (and coming back
    when closed), beside a polite client asking 4 rows at a time."""
    held_mb = 16
    ckpt = make_checkpoint(tmp_path / "m.pt", 1)
    path = tmp_path / "f.sock"
    server = start_server(
        "--model", str(ckpt), "--bind", f"unix://{path}", "--metrics-port", "-1",
        "--set", f"infer.max_held_mb={held_mb}",
    )  # fmt: skip
    pid = server.proc.pid
    features, legal = random_batch(np.random.default_rng(5), 256)
    frame = encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal)
    stop = threading.Event()
    sent = [0] * 16
    closed = [0] * 16

    def flood(k: int) -> None:
        while not stop.is_set():
            with socket.socket(socket.AF_UNIX) as sock:
                try:
                    sock.connect(str(path))
                    for _ in range(1024):
                        if stop.is_set():
                            return
                        sock.sendall(frame)
                        sent[k] += 1
                    stop.wait()  # hold them all unanswered-and-unread until the end
                except OSError:
                    closed[k] += 1  # the server closed it: come back

    try:
        with client_for(server.address) as polite:
            f, lg = random_batch(np.random.default_rng(6), 4)
            polite.evaluate(f, lg)
            baseline_rss = _rss_bytes(pid)
            threads = [threading.Thread(target=flood, args=(k,), daemon=True) for k in range(16)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 120
            while min(sent) < 4:  # the flood is on (each sends until the server stops reading)
                assert time.monotonic() < deadline, "flooders could not send"
                time.sleep(0.02)
            latencies, peak_rss = [], 0
            for seed in range(30):
                f, lg = random_batch(np.random.default_rng(100 + seed), 4)
                started = time.perf_counter()
                values = polite.evaluate(f, lg)[1]
                latencies.append(time.perf_counter() - started)
                np.testing.assert_allclose(values, expected(1, f, lg).values, atol=1e-5)
                peak_rss = max(peak_rss, _rss_bytes(pid))
            growth = peak_rss - baseline_rss
            print(
                f"polite 4-row requests under the flood: median {np.median(latencies):.3f} s, "
                f"max {max(latencies):.3f} s; flood frames sent {sum(sent)}, connections closed "
                f"by the server {sum(closed)}; server RSS growth {growth / 2**20:.0f} MiB "
                f"(max_held_mb {held_mb})"
            )
            # The bound: max_held plus one frame and one batch's replies, and the allocator's
            # slack; the unbounded server grew by gigabytes here.
            assert growth < (3 * held_mb + 64) * 2**20, growth
            # Held back: each flooder's sends block once its unread replies pass the bound (or
            # it is closed for holding the most, and comes back).
            assert sum(closed) > 0 or sum(sent) < 16 * 1024
    finally:
        stop.set()
        assert server.stop(signal.SIGINT) == 0
