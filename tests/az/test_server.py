"""The inference server and client over real sockets, with the server in a real process.

Routing is checked by value: every request carries its own random features, and each reply
must equal the same checkpoint's forward pass computed locally by the requester.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from leaguezero.az.checkpoint import SchemaIds, save_checkpoint
from leaguezero.az.inference.client import InferenceClient, InferenceError
from leaguezero.az.inference.local import forward_numpy
from leaguezero.az.inference.protocol import (
    LENGTH,
    Status,
    decode_reply,
    encode_control_request,
    encode_eval_request,
)
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, NUM_ACTIONS, RULESET_ID
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net

torch.set_num_threads(1)
SCHEMA = SchemaIds(FEATURE_SCHEMA_ID, ACTION_SPACE_ID, RULESET_ID)
F, A = NUM_FEATURES, NUM_ACTIONS


# ---------------------------------------------------------------------------- helpers
def make_checkpoint(path: Path, seed: int, schema: SchemaIds = SCHEMA) -> Path:
    net = build_net(hidden=32, blocks=1, margin_head=True, seed=seed)
    save_checkpoint(path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=schema)
    return path


def expected(seed: int, features: np.ndarray, legal: np.ndarray):
    """The reference answer: the same net, in this process, one request at a time."""
    net = build_net(hidden=32, blocks=1, margin_head=True, seed=seed).eval()
    return forward_numpy(net, features, legal=legal)


def random_batch(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    features = rng.standard_normal((rows, F)).astype(np.float32)
    legal = rng.random((rows, A)) < 0.5
    legal[:, 40] = True  # at least one legal action per row
    return features, legal


@dataclass
class Server:
    proc: subprocess.Popen
    address: str
    metrics_port: int | None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return urllib.request.urlopen(url, timeout=10).read().decode()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


def start_server(*args: str, expect_fail: bool = False) -> Server:
    """Run ``yz infer-server ARGS`` in a new process and wait for its ``listening on`` line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # float32 unless the test picks a dtype: answers are compared with this process's float32
    # forward (the server's default, selfplay.inference_dtype, is bfloat16 where the CPU has it).
    dtype = [] if "--dtype" in args else ["--dtype", "float32"]
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", *args, *dtype]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = re.match(r"listening on (\S+) metrics (\S+)", line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep pipe drained
            port = None if match.group(2) == "None" else int(match.group(2))
            return Server(proc, match.group(1), port)
    proc.wait(timeout=30)
    if expect_fail:
        return Server(proc, "".join(lines), None)
    raise AssertionError(f"server did not start:\n{''.join(lines)}")


@pytest.fixture
def checkpoints(tmp_path: Path) -> dict[int, Path]:
    return {seed: make_checkpoint(tmp_path / f"m{seed}.pt", seed) for seed in (1, 2)}


def client_for(address: str, **kwargs) -> InferenceClient:
    return InferenceClient(address, feature_schema_id=FEATURE_SCHEMA_ID, num_actions=A, **kwargs)


def histogram_median_bucket(metrics: str, name: str, model: str) -> tuple[float, float]:
    """(upper bound of the bucket holding the median, total count) of a Prometheus histogram."""
    buckets = []
    for le, count in re.findall(rf'{name}_bucket{{le="([^"]+)",model="{model}"}} (\S+)', metrics):
        buckets.append((float(le), float(count)))
    total = buckets[-1][1]
    return next(le for le, c in buckets if c >= total / 2), total


# ---------------------------------------------------------------------------- many clients
def _client_process(address: str, seed: int, n_requests: int) -> tuple[int, int, float]:
    """One client process: submit all requests at once (tickets), then check every reply."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(1000 + seed)
    batches = [random_batch(rng, int(rng.integers(1, 9))) for _ in range(n_requests)]
    with client_for(address) as client:
        futures = [client.submit(f, legal) for f, legal in batches]
        replies = [fut.result(timeout=120) for fut in futures]
    worst, rows = 0.0, 0
    for (features, legal), reply in zip(batches, replies, strict=True):
        want = expected(1, features, legal)
        np.testing.assert_allclose(reply.logits, want.logits, atol=1e-5)  # -inf where illegal
        np.testing.assert_allclose(reply.values, want.values, atol=1e-5)
        np.testing.assert_allclose(reply.margins, want.margins, atol=1e-5)
        worst = max(worst, float(np.abs(reply.values - want.values).max()))
        rows += len(features)
    return len(replies), rows, worst


def test_many_client_processes_every_reply_routed_and_batched(checkpoints, tmp_path) -> None:
    sock = f"unix://{tmp_path}/s.sock"
    server = start_server(
        "--model", str(checkpoints[1]), "--bind", sock, "--set", "infer.max_wait_us=2000"
    )
    try:
        ctx = multiprocessing.get_context("spawn")
        n_procs, n_requests = 4, 600  # 2,400 request frames in flight at once
        with ctx.Pool(n_procs) as pool:
            results = pool.starmap(
                _client_process, [(server.address, s, n_requests) for s in range(n_procs)]
            )
        assert [r[0] for r in results] == [n_requests] * n_procs
        total_rows = sum(r[1] for r in results)
        metrics = server.metrics()
        assert f'lz_infer_evals_total{{model="0"}} {float(total_rows)}' in metrics
        median, batches = histogram_median_bucket(metrics, "lz_infer_batch_rows", "0")
        assert median > 1, f"median batch size bucket {median} over {batches} batches"
        assert batches < n_procs * n_requests  # frames were merged across clients
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- robustness
def _raw_request(sock: socket.socket, frame: bytes):
    sock.sendall(frame)
    (length,) = LENGTH.unpack(sock.recv(4, socket.MSG_WAITALL))
    return decode_reply(sock.recv(length, socket.MSG_WAITALL))


def test_malformed_frames_get_errors_and_others_keep_being_served(checkpoints, tmp_path) -> None:
    server = start_server("--model", str(checkpoints[1]), "--bind", f"unix://{tmp_path}/s.sock")
    rng = np.random.default_rng(5)
    features, legal = random_batch(rng, 3)
    good = encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal)
    cases = [
        (LENGTH.pack(6) + b"XXXXXX", Status.MALFORMED),
        (good[:4] + good[4:6] + b"\x07" + good[7:], Status.UNSUPPORTED_VERSION),
        (LENGTH.pack(len(good) - 5) + good[4:-1], Status.MALFORMED),  # body shorter than N*F
        (encode_eval_request(2, 9, FEATURE_SCHEMA_ID, features, legal), Status.UNKNOWN_MODEL),
        (encode_eval_request(3, 0, 77, features, legal), Status.SCHEMA_MISMATCH),
        (
            encode_eval_request(4, 0, FEATURE_SCHEMA_ID, features[:, :5], legal),
            Status.SHAPE_MISMATCH,
        ),
        (encode_control_request(5, 99, 0), Status.UNKNOWN_OP),
    ]
    try:
        with client_for(server.address) as client, socket.socket(socket.AF_UNIX) as raw:
            raw.connect(server.address[len("unix://") :])
            for frame, status in cases:
                reply = _raw_request(raw, frame)
                assert reply.status == status, reply.message
                assert reply.message  # every error says what went wrong
                # The same raw connection and another client are still served correctly.
                assert _raw_request(raw, good).ok
                _, values = client.evaluate(features, legal)
                np.testing.assert_allclose(values, expected(1, features, legal).values, atol=1e-5)
            # A bogus length prefix cannot be resynchronised: error reply, that connection closes.
            reply = _raw_request(raw, LENGTH.pack(2**31) + b"junk")
            assert reply.status == Status.FRAME_TOO_LARGE
            assert raw.recv(1) == b""
            # A client that dies half-way through a frame does not disturb anyone.
            with socket.socket(socket.AF_UNIX) as half:
                half.connect(server.address[len("unix://") :])
                half.sendall(good[: len(good) // 2])
            assert client.evaluate(features, legal)[0].shape == (3, A)
            assert 'lz_infer_errors_total{status="SCHEMA_MISMATCH"} 1.0' in server.metrics()
    finally:
        assert server.stop() == 0


def test_two_models_hot_swap_and_failed_loads(checkpoints, tmp_path) -> None:
    wrong = make_checkpoint(tmp_path / "wrong.pt", 3, SchemaIds(99, ACTION_SPACE_ID, RULESET_ID))
    server = start_server(
        "--model",
        f"best={checkpoints[1]}",
        "--model",
        f"candidate={checkpoints[2]}",
        "--bind",
        f"unix://{tmp_path}/s.sock",
    )
    features, legal = random_batch(np.random.default_rng(6), 4)
    want = {seed: expected(seed, features, legal).values for seed in (1, 2)}
    try:
        with client_for(server.address) as client:
            best, candidate = client.for_model(0), client.for_model(1)
            np.testing.assert_allclose(best.evaluate(features, legal)[1], want[1], atol=1e-5)
            np.testing.assert_allclose(candidate.evaluate(features, legal)[1], want[2], atol=1e-5)
            assert set(client.info()["models"]) == {"0", "1"}
            client.load_model(0, str(checkpoints[2]))  # promote: best := candidate
            np.testing.assert_allclose(best.evaluate(features, legal)[1], want[2], atol=1e-5)
            messages = set()
            for bad in [tmp_path / "missing.pt", wrong]:
                with pytest.raises(InferenceError) as info:
                    client.load_model(0, str(bad))
                assert info.value.status == Status.LOAD_FAILED
                messages.add(str(info.value))
            assert len(messages) == 1  # the reply never says whether a file exists
            np.testing.assert_allclose(best.evaluate(features, legal)[1], want[2], atol=1e-5)
            # The CLI path: `yz infer-load` puts the first net back as best.
            cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-load", "--bind",
                   server.address, "--model", f"best={checkpoints[1]}"]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and '"0"' in done.stdout, done.stderr
            np.testing.assert_allclose(best.evaluate(features, legal)[1], want[1], atol=1e-5)
            # SIGHUP reloads every model from its path: overwrite candidate's file, then signal.
            make_checkpoint(checkpoints[2], seed=3)
            server.proc.send_signal(signal.SIGHUP)
            want3 = expected(3, features, legal).values
            deadline = time.monotonic() + 30
            while not np.allclose(candidate.evaluate(features, legal)[1], want3, atol=1e-5):
                assert time.monotonic() < deadline, "SIGHUP did not reload the candidate"
                time.sleep(0.05)
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- restart
def test_restart_reconnects_and_resends_in_flight_requests(checkpoints, tmp_path) -> None:
    path = tmp_path / "s.sock"
    # A long max_wait (2 s) holds requests in the server's queue, so they are in flight at the
    # kill even on a loaded machine.
    args = (
        "--model",
        str(checkpoints[1]),
        "--bind",
        f"unix://{path}",
        "--set",
        "infer.max_wait_us=2000000",
        "--set",
        "infer.max_batch=100000",
        "--set",
        "infer.eager_flush=false",  # a lone client's frames are held too
    )
    server = start_server(*args)
    rng = np.random.default_rng(7)
    batches = [random_batch(rng, 2) for _ in range(300)]
    client = client_for(server.address, reconnect_timeout_s=60)
    try:
        first = [client.submit(f, legal) for f, legal in batches[:100]]
        # Wait until the server holds all 200 rows in its queue (max_wait keeps them 2 s).
        queued = 'lz_infer_queue_rows{model="0"} 200.0'
        deadline = time.monotonic() + 60
        while queued not in server.metrics():
            assert time.monotonic() < deadline, "the requests never reached the server's queue"
            time.sleep(0.02)
        assert not any(fut.done() for fut in first)  # held by max_wait: in flight
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL  # crash: stale socket file left
        assert path.exists()
        second = [client.submit(f, legal) for f, legal in batches[100:200]]  # while it is down
        server = start_server(*args)
        third = [client.submit(f, legal) for f, legal in batches[200:]]
        for fut, (features, legal) in zip(first + second + third, batches, strict=True):
            want = expected(1, features, legal)
            np.testing.assert_allclose(fut.result(timeout=60).values, want.values, atol=1e-5)
        assert client.stats.reconnects >= 1 and client.stats.resent >= 100
        assert client.stats.requests == 300 and client.stats.latency_counts.sum() == 300
        assert client.stats.latency_quantile_s(0.9) >= 0.1  # the held/resent ones waited long
        assert client.pending_rows == 0
    finally:
        client.close()
        assert server.stop() == 0
    assert not path.exists()  # a clean SIGTERM removes the socket file


def test_backpressure_blocks_submit_at_max_pending(checkpoints, tmp_path) -> None:
    server = start_server(
        "--model",
        str(checkpoints[1]),
        "--bind",
        f"unix://{tmp_path}/s.sock",
        "--set",
        "infer.max_wait_us=5000000",  # replies held 5 s: the 9th frame must wait for room
        "--set",
        "infer.max_batch=100000",
        "--set",
        "infer.eager_flush=false",
    )
    rng = np.random.default_rng(8)
    batches = [random_batch(rng, 8) for _ in range(20)]
    futures = []
    try:
        with client_for(server.address, max_pending_total=64) as client:
            thread = threading.Thread(
                target=lambda: futures.extend(client.submit(f, lg) for f, lg in batches)
            )
            thread.start()
            deadline = time.monotonic() + 60
            while client.pending_rows < 64:  # 8 frames sent, the 9th waits
                assert time.monotonic() < deadline, "the client never filled its window"
                time.sleep(0.01)
            assert thread.is_alive() and client.pending_rows == 64
            thread.join(timeout=30)
            assert not thread.is_alive()
            for fut, (features, legal) in zip(futures, batches, strict=True):
                want = expected(1, features, legal).values
                np.testing.assert_allclose(fut.result(timeout=30).values, want, atol=1e-5)
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------------------- binding
def test_socket_is_owner_only_and_live_or_foreign_paths_are_refused(checkpoints, tmp_path) -> None:
    path = tmp_path / "s.sock"
    server = start_server("--model", "dummy", "--bind", f"unix://{path}", "--metrics-port", "-1")
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        second = start_server("--bind", f"unix://{path}", "--metrics-port", "-1", expect_fail=True)
        assert second.proc.returncode == 2 and "another server is listening" in second.address
    finally:
        assert server.stop(signal.SIGINT) == 0
    (tmp_path / "file").write_text("precious")
    third = start_server("--bind", f"unix://{tmp_path}/file", expect_fail=True)
    assert "is not a socket" in third.address and (tmp_path / "file").read_text() == "precious"


def test_tcp_loopback_works_and_public_bind_needs_the_flag(checkpoints) -> None:
    refused = start_server("--bind", "tcp://0.0.0.0:0", "--metrics-port", "-1", expect_fail=True)
    assert refused.proc.returncode == 2 and "--public" in refused.address
    server = start_server("--model", str(checkpoints[2]), "--bind", "tcp://127.0.0.1:0")
    try:
        assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", server.address)
        features, legal = random_batch(np.random.default_rng(9), 5)
        with client_for(server.address) as client:
            priors, values = client.evaluate(features, legal)
        np.testing.assert_allclose(values, expected(2, features, legal).values, atol=1e-5)
        np.testing.assert_allclose(priors.sum(axis=1), 1.0, rtol=1e-5)
        assert np.all(priors[~legal] == 0)
    finally:
        assert server.stop() == 0


def test_client_without_server_fails_with_a_clear_error(tmp_path) -> None:
    with pytest.raises(ConnectionError, match="no inference server at unix://"):
        client_for(f"unix://{tmp_path}/none.sock", connect_timeout_s=0.3)


def test_model_specs_parse() -> None:
    from leaguezero.yatzy.cli.infer import parse_model_specs

    specs = parse_model_specs(["best.pt", "candidate=c.pt", "3=dummy"])
    assert specs == {0: "best.pt", 1: "c.pt", 3: "dummy"}
    with pytest.raises(ValueError, match="twice"):
        parse_model_specs(["a.pt", "best=b.pt"])
    with pytest.raises(ValueError, match="ID=PATH"):
        parse_model_specs(["champion=x.pt"])


@pytest.mark.gpu
def test_cuda_server_matches_cpu_reference(checkpoints, tmp_path) -> None:
    server = start_server("--model", str(checkpoints[1]), "--bind", f"unix://{tmp_path}/g.sock",
                          "--device", "cuda")  # fmt: skip
    features, legal = random_batch(np.random.default_rng(10), 256)
    try:
        with client_for(server.address) as client:
            reply = client.submit(features, legal).result(timeout=60)
        want = expected(1, features, legal)
        np.testing.assert_allclose(reply.values, want.values, atol=1e-4)
        np.testing.assert_allclose(reply.logits, want.logits, atol=1e-4)
    finally:
        assert server.stop() == 0
