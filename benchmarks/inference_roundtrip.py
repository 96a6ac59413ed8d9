"""Evals/s of a 2x256 YatzyNet: in-process TorchEvaluator vs the socket server, batch 256.

One command, one process tree: starts ``yz infer-server`` (1 torch thread) on a Unix socket,
times blocking ``evaluate`` calls of the same batches both ways (interleaved rounds, so load
from other processes hits both alike) and prints the ratio socket / in-process. A lockstep
search makes exactly this call once per leaf batch, so the ratio bounds benchmark (b).

    python benchmarks/inference_roundtrip.py [--batch 256] [--seconds 3] [--bind tcp://127.0.0.1:0]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import torch

from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.net.networks import build_net


def rate(evaluate, features, legal, seconds: float) -> float:
    """Rows evaluated per second by repeated ``evaluate`` calls for about ``seconds``."""
    evaluate(features, legal)  # warm-up
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        evaluate(features, legal)
        calls += 1
    return calls * len(features) / (time.perf_counter() - start)


def server_means_ms(metrics_port: int) -> tuple[float, float]:
    """Mean forward-pass time and mean frame latency (read -> reply queued) of model 0."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()

    def mean(name: str) -> float:
        total = float(re.search(rf'{name}_sum{{model="0"}} (\S+)', text).group(1))
        count = float(re.search(rf'{name}_count{{model="0"}} (\S+)', text).group(1))
        return total / count * 1e3

    return mean("lz_infer_forward_seconds"), mean("lz_infer_latency_seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bind", default="", help="default: a Unix socket in a temp folder")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bind = args.bind or f"unix://{tempfile.mkdtemp()}/bench.sock"
    # float32: the answers are compared with the local float32 net below.
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", "dummy",
           "--bind", bind, "--device", args.device, "--metrics-port", "0",
           "--set", "model.hidden=256", "--set", "model.blocks=2",
           "--dtype", "float32"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env)  # fmt: skip
    try:
        ready = re.match(r"listening on (\S+) metrics (\d+)", server.stdout.readline())
        address, metrics_port = ready.group(1), int(ready.group(2))
        rng = np.random.default_rng(0)
        features = rng.standard_normal((args.batch, NUM_FEATURES)).astype(np.float32)
        legal = rng.random((args.batch, NUM_ACTIONS)) < 0.5
        local = TorchEvaluator(build_net(hidden=256, blocks=2), FEATURE_SCHEMA_ID, args.device)
        with InferenceClient(address, feature_schema_id=FEATURE_SCHEMA_ID,
                             num_actions=NUM_ACTIONS) as client:  # fmt: skip
            p_local, _ = local.evaluate(features, legal)
            p_sock, _ = client.evaluate(features, legal)
            assert np.allclose(p_local, p_sock, atol=1e-5), "server and local nets differ"
            local_rates, sock_rates = [], []
            for _ in range(args.rounds):
                local_rates.append(rate(local.evaluate, features, legal, args.seconds))
                sock_rates.append(rate(client.evaluate, features, legal, args.seconds))
            client_ms = client.stats.latency_sum_s / client.stats.requests * 1e3
        server_forward_ms, server_latency_ms = server_means_ms(metrics_port)
        lo, so = np.median(local_rates), np.median(sock_rates)
        print(f"batch {args.batch}, 2x256 YatzyNet, {args.device}, {address.split(':')[0]}")
        print(f"  in-process  {lo:10.0f} evals/s  ({args.batch / lo * 1e3:.2f} ms/batch)")
        print(f"  socket      {so:10.0f} evals/s  ({args.batch / so * 1e3:.2f} ms/batch)")
        print(f"  ratio socket/in-process  {so / lo:.2f}  (target >= 0.7)")
        print(
            f"  socket round trip {client_ms:.2f} ms = server forward {server_forward_ms:.2f} ms"
            f" + server queue/IO {server_latency_ms - server_forward_ms:.2f} ms"
            f" + transport and thread hand-offs {client_ms - server_latency_ms:.2f} ms (means)"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
