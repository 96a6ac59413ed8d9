"""Idle connections and never-reading floods against ``yz infer-server`` over TCP (issue 54 item 2).

    python benchmarks/server_idle_lockout.py [--idle 130] [--flooders 16] [--good 8]
        [--seconds 5] [--src DIR]

(a) Lock-out: IDLE connections that never say anything are held open from one peer (one that
the server closes is opened again at once), then a normal ``InferenceClient`` (in a child
process, its own stderr) connects and asks one 4-row request. Prints that request's latency,
the child's stderr line count and CPU seconds (deadline 120 s).

(b) Fairness: FLOODERS connections pipeline 256-row frames and never read a reply, beside GOOD
clients that each ask 4-row requests in a loop for SECONDS; prints the good clients' requests/s
and the server's RSS growth, and the same GOOD clients' rate with no flood first.

``--src DIR`` runs the server and the clients from another checkout's ``src`` (e.g. ``git
worktree add /tmp/before HEAD`` before a change, then ``--src /tmp/before/src``). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

CHILD = r"""
import sys, time, json
import numpy as np
from leaguezero.az.inference.client import InferenceClient
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import NUM_ACTIONS
rng = np.random.default_rng(0)
features = rng.standard_normal((4, NUM_FEATURES)).astype(np.float32)
legal = np.ones((4, NUM_ACTIONS), bool)
started = time.perf_counter()
client = InferenceClient(sys.argv[1], feature_schema_id=FEATURE_SCHEMA_ID,
                         num_actions=NUM_ACTIONS, connect_timeout_s=120, health_interval_s=None)
client.evaluate(features, legal)
print(json.dumps({"latency_s": time.perf_counter() - started}), flush=True)
client.close()
"""

GOOD = r"""
import sys, time
import numpy as np
from leaguezero.az.inference.client import InferenceClient
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import NUM_ACTIONS
rng = np.random.default_rng(int(sys.argv[3]))
features = rng.standard_normal((4, NUM_FEATURES)).astype(np.float32)
legal = np.ones((4, NUM_ACTIONS), bool)
client = InferenceClient(sys.argv[1], feature_schema_id=FEATURE_SCHEMA_ID,
                         num_actions=NUM_ACTIONS, connect_timeout_s=120, health_interval_s=None)
client.evaluate(features, legal)
print("ready", flush=True)
sys.stdin.readline()
end, n = time.perf_counter() + float(sys.argv[2]), 0
while time.perf_counter() < end:
    client.evaluate(features, legal)
    n += 1
print(n, flush=True)
client.close()
"""


def env_for(src: Path | None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def start_server(src: Path | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", "dummy"]
    cmd += ["--bind", "tcp://127.0.0.1:0", "--metrics-port", "-1", "--dtype", "float32"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env_for(src)
    )
    for line in proc.stdout:
        match = re.match(r"listening on (\S+)", line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, match.group(1)
    raise SystemExit(f"server did not start ({src or 'this code'})")


def hold_idle(host: str, port: int, count: int, stop: threading.Event) -> list[int]:
    """Keep ``count`` silent connections open (reopened when the server closes one); returns a
    one-item list counting the reopenings."""
    reopened = [0]

    def keep() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((host, port), timeout=5) as sock:
                    sock.settimeout(0.5)
                    while not stop.is_set():
                        try:
                            if sock.recv(65536) == b"":
                                break  # closed by the server (or refused BUSY): come back
                        except TimeoutError:
                            continue
            except OSError:
                time.sleep(0.05)
            reopened[0] += 1

    for _ in range(count):
        threading.Thread(target=keep, daemon=True).start()
    return reopened


def lockout(src: Path | None, idle: int) -> None:
    server, address = start_server(src)
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    stop = threading.Event()
    try:
        reopened = hold_idle(host, int(port), idle, stop)
        time.sleep(2.0)  # all connected (and, before the change, the 129th and 130th refused)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, address], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env_for(src),
        )  # fmt: skip
        started = time.perf_counter()
        try:
            out, err = child.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        wall = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        lines = err.count("\n")
        served = "latency_s" in out
        latency = json.loads(out)["latency_s"] if served else float("nan")
        print(
            f"(a) {idle} idle connections, {src or 'this code'}: good client "
            f"{'served' if served else 'NOT served'}: connect + one 4-row request "
            f"{latency:.2f} s (child process {wall:.2f} s wall with imports), stderr {lines} "
            f"lines, CPU {cpu:.2f} s; idle connections reopened {reopened[0]}",
            flush=True,
        )
        if lines:
            print("    first stderr line:", err.splitlines()[0][:160], flush=True)
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=60)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def good_rate(src: Path | None, address: str, good: int, seconds: float) -> float:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GOOD, address, str(seconds), str(k)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env_for(src),
        )
        for k in range(good)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    total = sum(int(proc.stdout.readline()) for proc in procs)
    for proc in procs:
        proc.wait(timeout=60)
    return total / seconds


def fairness(src: Path | None, flooders: int, good: int, seconds: float) -> None:
    # The frame is built with this checkout's encoder: the wire format is the same (v3).
    import numpy as np

    from leaguezero.az.inference.protocol import encode_eval_request
    from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
    from leaguezero.yatzy.game.tables import NUM_ACTIONS

    server, address = start_server(src)
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    features = np.random.default_rng(5).standard_normal((256, NUM_FEATURES)).astype(np.float32)
    legal = np.ones((256, NUM_ACTIONS), bool)
    frame = encode_eval_request(1, 0, FEATURE_SCHEMA_ID, features, legal)
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port)), timeout=5) as sock:
                    sock.settimeout(None)
                    while not stop.is_set():
                        sock.sendall(frame)
            except OSError:
                time.sleep(0.05)

    try:
        calm = good_rate(src, address, good, seconds)
        base = rss_bytes(server.pid)
        for _ in range(flooders):
            threading.Thread(target=flood, daemon=True).start()
        time.sleep(1.0)
        flooded = good_rate(src, address, good, seconds)
        growth = (rss_bytes(server.pid) - base) / 2**20
        print(
            f"(b) {good} good clients, {src or 'this code'}: {calm:.1f} requests/s alone, "
            f"{flooded:.1f} requests/s beside {flooders} never-reading flooders; server RSS "
            f"growth {growth:+.0f} MB",
            flush=True,
        )
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=130)
    parser.add_argument("--flooders", type=int, default=16)
    parser.add_argument("--good", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--only", choices=["a", "b"], default=None)
    args = parser.parse_args()
    if args.only in (None, "a"):
        lockout(args.src, args.idle)
    if args.only in (None, "b"):
        fairness(args.src, args.flooders, args.good, args.seconds)


if __name__ == "__main__":
    main()
