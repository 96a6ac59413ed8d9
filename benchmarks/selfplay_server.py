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

On a GPU machine (``--server-device cuda``, bfloat16 by the server's ``auto`` dtype) the same
pairs measure many CPU workers feeding one GPU server; each (B) phase then also prints the
server's evaluations per second and forward passes per second (its Prometheus counters), the
share of the phase's wall time the server spent in forward passes (host copies included), and
the GPU's busy share as ``nvidia-smi`` samples it (``utilization.gpu``, every 0.2 s):
``python benchmarks/selfplay_server.py --server-device cuda --workers 14 --local-workers 14
--games 4096`` (the baseline then is as many workers, each evaluating in process on its core).
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
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import contextlib

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.schema import build_network, checkpoint_schema
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.workers import run_selfplay_workers


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_counters(metrics_port: int | None) -> dict[str, float]:
    """The server's summed counters: rows evaluated, forward passes and forward seconds."""
    if metrics_port is None:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    names = {
        "lz_infer_evals_total": "evals",
        "lz_infer_forward_seconds_count": "forwards",
        "lz_infer_forward_seconds_sum": "forward_s",
    }
    out = dict.fromkeys(names.values(), 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


class GpuSampler:
    """``nvidia-smi``'s utilization.gpu every 0.2 s while running (the GPU's busy share)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
             "-lms", "200"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                self.samples.append(float(line.strip()))

    def stop(self) -> float:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._thread.join(timeout=10)
        return sum(self.samples) / max(len(self.samples), 1)


def play(
    cfg: YatzyConfig,
    best: Path,
    games: int,
    seed: int,
    server_pid: int | None,
    metrics_port: int | None = None,
    gpu: bool = False,
) -> dict:
    """One self-play phase; wall seconds and CPU seconds (workers + server) per game."""
    with tempfile.TemporaryDirectory(prefix="lz-sp-") as out:
        server0 = None if server_pid is None else process_cpu_seconds(server_pid)
        counters0 = server_counters(metrics_port)
        sampler = GpuSampler() if gpu else None
        cpu0 = children_cpu_seconds()
        t0 = time.perf_counter()
        stats = run_selfplay_workers(
            cfg, best, Path(out), settings=SearchSettings.from_config(cfg), games=games, seed=seed
        )
        wall = time.perf_counter() - t0
        cpu = children_cpu_seconds() - cpu0
        gpu_busy = sampler.stop() if sampler is not None else None
        if server_pid is not None:
            cpu += process_cpu_seconds(server_pid) - server0
        counters = {k: v - counters0[k] for k, v in server_counters(metrics_port).items()}
    result = {"games_per_min": 60 * stats.games / wall, "cpu_per_game": cpu / stats.games}
    if counters:
        result["evals_per_s"] = counters["evals"] / wall
        result["forwards_per_s"] = counters["forwards"] / wall
        result["rows_per_forward"] = counters["evals"] / max(counters["forwards"], 1)
        result["forward_share"] = counters["forward_s"] / wall
    if gpu_busy is not None:
        result["gpu_busy"] = gpu_busy / 100
    return result


def start_server(
    ckpt: Path, sock: Path, threads: int = 1, device: str = "cpu", dtype: str | None = None
) -> tuple[subprocess.Popen, int | None]:
    """The server and its Prometheus metrics port."""
    command = [
        sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", str(ckpt),
        "--bind", f"unix://{sock}", "--metrics-port", "0", "--threads", str(threads),
        "--device", device,
    ]  # fmt: skip
    if dtype:
        command += ["--dtype", dtype]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in server.stdout:
        if line.startswith("listening on"):
            print(line.strip(), flush=True)
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep it drained
            port = line.split(" metrics ", 1)[1].split()[0]
            return server, (int(port) if port.isdigit() else None)
    raise RuntimeError("the inference server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=1024, help="games per phase, all workers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--server-threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument(
        "--local-workers", type=int, default=1, help="(A)'s workers, each evaluating in process"
    )
    parser.add_argument("--server-device", default="cpu", help="cpu or cuda")
    parser.add_argument("--server-dtype", default=None, help="default: the server's (auto)")
    args = parser.parse_args()
    gpu = args.server_device == "cuda"

    folder = Path(tempfile.mkdtemp(prefix="lz-sp-bench-"))
    base = YatzyConfig()
    net = build_network(base, seed=0)
    best = folder / "best.pt"
    save_checkpoint(best, net, kind=net.kind, kwargs=net.kwargs(), schema=checkpoint_schema("turn"))
    sock = folder / "infer.sock"
    local_cfg = base.model_copy(deep=True)
    local_cfg.selfplay.workers, local_cfg.selfplay.infer = args.local_workers, "local"
    server_cfg = base.model_copy(deep=True)
    server_cfg.selfplay.workers, server_cfg.selfplay.infer = args.workers, f"unix://{sock}"
    server, metrics_port = start_server(
        best, sock, args.server_threads, args.server_device, args.server_dtype
    )
    rows = []
    try:
        play(local_cfg, best, 64, 0, None)  # warm-up: numba caches, the server's first forward
        play(server_cfg, best, 64, 0, server.pid)
        for pair in range(args.pairs):
            remote = play(server_cfg, best, args.games, 100 + pair, server.pid, metrics_port, gpu)
            local = play(local_cfg, best, args.games, 100 + pair, None)
            load = os.getloadavg()[0]
            rows.append((remote, local, load))
            ratio = remote["games_per_min"] / local["games_per_min"]
            print(
                f"pair {pair + 1}: {args.workers} workers + server "
                f"{remote['games_per_min']:,.0f} games/min ({remote['cpu_per_game']:.3f} CPU s a "
                f"game, server included) vs {args.local_workers} in process "
                f"{local['games_per_min']:,.0f} "
                f"({local['cpu_per_game']:.3f}): {ratio:.2f}x (load {load:.1f})",
                flush=True,
            )
            if "evals_per_s" in remote:
                busy = f", GPU busy {remote['gpu_busy']:.0%}" if gpu else ""
                print(
                    f"  server on {args.server_device}: {remote['evals_per_s']:,.0f} evaluations/s,"
                    f" {remote['forwards_per_s']:,.0f} forwards/s of "
                    f"{remote['rows_per_forward']:.0f} rows, in forward passes "
                    f"{remote['forward_share']:.0%} of the wall time{busy}",
                    flush=True,
                )
    finally:
        server.terminate()
        server.wait(timeout=30)
    ratios = sorted(r["games_per_min"] / l["games_per_min"] for r, l, _ in rows)
    cpu = sorted(l["cpu_per_game"] / r["cpu_per_game"] for r, l, _ in rows)
    print(
        f"games per wall-minute, {args.workers} workers + server / {args.local_workers} in "
        f"process, "
        f"{args.pairs} interleaved pairs: {' / '.join(f'{x:.2f}' for x in ratios)}x "
        f"(target >= 1.6x with 2 workers on 2 cores); CPU per game, in process / socket "
        f"(workers + server): {' / '.join(f'{x:.2f}' for x in cpu)}x; load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
