"""Self-play with N workers and one inference server vs one worker in process (figures, never
pass/fail).

``python benchmarks/selfplay_server.py --workers 2 --pairs 3`` plays the default self-play of
``yz run`` (the turn search, the default board-tower network, ``selfplay.concurrent_games``
games in lockstep per worker, ``--games`` games in all) twice per pair, interleaved so both
sides of each ratio share the machine's load:

(A) ``selfplay.workers = 1``, ``selfplay.infer = local``: one worker process evaluating in
    process (the baseline);
(B) ``selfplay.workers = N``, ``selfplay.infer = unix://...``: N worker processes sharing one
    ``yz infer-server`` (one torch thread), which they send compact positions (protocol kind 4).

Both go through ``run_selfplay_workers``, the code ``yz run`` uses, so both pay the same worker
start-up. Printed per pair: games per wall-minute of each and the ratio B / A (the issue's
target with 2 workers on 2 cores: >= 1.6x), and the CPU seconds per game of each (workers, plus
the server's for B: what the socket path costs in CPU). The load average is printed with them.

Why 2 workers + one server cannot reach 2x of one worker in process on 2 cores: the forward
pass is ~85% of a decision's CPU in process (``benchmarks/turn_search.py`` (a)), and the server
runs forward passes one at a time (``--server-threads`` torch threads each); with one thread the
server alone bounds the rate at ~1 / 0.85 = 1.2x, whatever the number of workers. And each
worker is a spawned process that imports torch and numba (~4 CPU s) every self-play phase, as
large as a third of the default phase's play (1,024 games).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.train.kinds import build_network, checkpoint_schema
from leaguezero.yatzy.train.workers import run_selfplay_workers


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def play(cfg: YatzyConfig, best: Path, games: int, seed: int, server_pid: int | None) -> dict:
    """One self-play phase; wall seconds and CPU seconds (workers + server) per game."""
    with tempfile.TemporaryDirectory(prefix="lz-sp-") as out:
        server0 = None if server_pid is None else process_cpu_seconds(server_pid)
        cpu0 = children_cpu_seconds()
        t0 = time.perf_counter()
        stats = run_selfplay_workers(cfg, best, Path(out), games=games, seed=seed)
        wall = time.perf_counter() - t0
        cpu = children_cpu_seconds() - cpu0
        if server_pid is not None:
            cpu += process_cpu_seconds(server_pid) - server0
    return {"games_per_min": 60 * stats.games / wall, "cpu_per_game": cpu / stats.games}


def start_server(ckpt: Path, sock: Path, threads: int = 1) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", str(ckpt),
         "--bind", f"unix://{sock}", "--metrics-port", "-1", "--threads", str(threads)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    for line in server.stdout:
        if line.startswith("listening on"):
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep it drained
            return server
    raise RuntimeError("the inference server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=1024, help="games per phase, all workers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--server-threads", type=int, default=1, help="the server's torch threads")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="lz-sp-bench-"))
    base = YatzyConfig()
    net = build_network(base, seed=0)
    best = folder / "best.pt"
    save_checkpoint(best, net, kind=net.kind, kwargs=net.kwargs(), schema=checkpoint_schema("turn"))
    sock = folder / "infer.sock"
    local_cfg = base.model_copy(deep=True)
    local_cfg.selfplay.workers, local_cfg.selfplay.infer = 1, "local"
    server_cfg = base.model_copy(deep=True)
    server_cfg.selfplay.workers, server_cfg.selfplay.infer = args.workers, f"unix://{sock}"
    server = start_server(best, sock, args.server_threads)
    rows = []
    try:
        play(local_cfg, best, 64, 0, None)  # warm-up: numba caches, the server's first forward
        play(server_cfg, best, 64, 0, server.pid)
        for pair in range(args.pairs):
            remote = play(server_cfg, best, args.games, 100 + pair, server.pid)
            local = play(local_cfg, best, args.games, 100 + pair, None)
            load = os.getloadavg()[0]
            rows.append((remote, local, load))
            ratio = remote["games_per_min"] / local["games_per_min"]
            print(
                f"pair {pair + 1}: {args.workers} workers + server "
                f"{remote['games_per_min']:,.0f} games/min ({remote['cpu_per_game']:.3f} CPU s a "
                f"game, server included) vs 1 worker in process {local['games_per_min']:,.0f} "
                f"({local['cpu_per_game']:.3f}): {ratio:.2f}x (load {load:.1f})",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    ratios = sorted(r["games_per_min"] / l["games_per_min"] for r, l, _ in rows)
    cpu = sorted(l["cpu_per_game"] / r["cpu_per_game"] for r, l, _ in rows)
    print(
        f"games per wall-minute, {args.workers} workers + server / 1 worker in process, "
        f"{args.pairs} interleaved pairs: {' / '.join(f'{x:.2f}' for x in ratios)}x "
        f"(target >= 1.6x with 2 workers on 2 cores); CPU per game, in process / socket "
        f"(workers + server): {' / '.join(f'{x:.2f}' for x in cpu)}x; load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
