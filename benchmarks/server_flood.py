"""A polite client beside a flood of never-reading clients (issue 28 item 6).

    python benchmarks/server_flood.py [--flooders 16] [--frames 1024] [--rows 256]
        [--requests 30] [--pairs 2] [--baseline-src DIR]

Starts ``yz infer-server`` (the default settings: ``infer.max_held_mb`` 256, 128 connections)
on a Unix socket, lets FLOODERS clients each send up to FRAMES frames of ROWS rows without ever
reading a reply (a closed flooder connects again and goes on), and meanwhile times REQUESTS
4-row requests of a polite client. Prints the polite client's median and worst latency and the
server's RSS growth (VmRSS, sampled after each polite request). With ``--baseline-src DIR`` (e.g.
``git archive 03c1e7c | tar -x -C DIR``) the same flood runs against that code's server too, in
interleaved pairs (baseline, this code, baseline, ...), and the ratios are printed. Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.protocol import encode_eval_request
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import NUM_ACTIONS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def batch(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    features = rng.standard_normal((rows, NUM_FEATURES)).astype(np.float32)
    legal = rng.random((rows, NUM_ACTIONS)) < 0.5
    legal[:, 40] = True
    return features, legal


def start(src: Path | None, path: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", "dummy"]
    cmd += ["--bind", f"unix://{path}", "--metrics-port", "-1"]
    out = subprocess.PIPE
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if re.match(r"listening on ", line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
    raise SystemExit(f"server did not start ({src or 'this code'})")


def flood_run(src: Path | None, args: argparse.Namespace) -> dict[str, float]:
    path = os.path.join(tempfile.mkdtemp(prefix="lz-flood-"), "s.sock")
    proc = start(src, path)
    features, legal = batch(np.random.default_rng(5), args.rows)
    frame = encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal)
    stop = threading.Event()
    sent = [0] * args.flooders

    def flood(k: int) -> None:
        while not stop.is_set():
            with socket.socket(socket.AF_UNIX) as sock:
                try:
                    sock.connect(path)
                    for _ in range(args.frames):
                        if stop.is_set():
                            return
                        sock.sendall(frame)
                        sent[k] += 1
                    stop.wait()  # hold them all unanswered-and-unread until the end
                except OSError:
                    pass  # closed by the server: connect again

    try:
        client = InferenceClient(
            f"unix://{path}", feature_schema_id=FEATURE_SCHEMA_ID, num_actions=NUM_ACTIONS,
            connect_timeout_s=60, reconnect_timeout_s=600, health_interval_s=None,
        )  # fmt: skip
        rng = np.random.default_rng(6)
        client.evaluate(*batch(rng, 4))
        base = rss_bytes(proc.pid)
        threads = [
            threading.Thread(target=flood, args=(k,), daemon=True) for k in range(args.flooders)
        ]
        for t in threads:
            t.start()
        # The flood is on once each flooder has sent a few frames (a server that bounds unread
        # replies per connection stops reading them after that).
        while min(sent) < 4:
            time.sleep(0.01)
        latencies, peak = [], base
        for _ in range(args.requests):
            started = time.perf_counter()
            client.evaluate(*batch(rng, 4))
            latencies.append(time.perf_counter() - started)
            peak = max(peak, rss_bytes(proc.pid))
        client.close()
        return {
            "median_s": float(np.median(latencies)),
            "max_s": float(np.max(latencies)),
            "rss_growth_mib": (peak - base) / 2**20,
            "frames_sent": float(sum(sent)),
        }
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=120)


def show(name: str, r: dict[str, float]) -> None:
    print(
        f"{name:>9}: polite 4-row request median {r['median_s']:.3f} s, max {r['max_s']:.3f} s; "
        f"server RSS growth {r['rss_growth_mib']:.0f} MiB; "
        f"flood frames sent {r['frames_sent']:.0f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flooders", type=int, default=16)
    parser.add_argument("--frames", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    for pair in range(args.pairs):
        if args.baseline_src is not None:
            old = flood_run(args.baseline_src, args)
            show("baseline", old)
        new = flood_run(None, args)
        show("this code", new)
        if args.baseline_src is not None:
            print(
                f"pair {pair + 1}: worst latency baseline / this code "
                f"{old['max_s'] / new['max_s']:.1f}x, RSS growth "
                f"{old['rss_growth_mib']:.0f} / {new['rss_growth_mib']:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
