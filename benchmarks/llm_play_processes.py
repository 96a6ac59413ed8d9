"""Wall seconds of a GRPO step of the smol recipe with its games played by one process (the trainer)
against two (``train.play_processes: 2``: the trainer and a helper), on the same seeds (figures,
never pass/fail).

    python benchmarks/llm_play_processes.py                # 1 pair, 2 steps a run
    python benchmarks/llm_play_processes.py --steps 3 --pairs 2

Each run is ``leaguezero diplomacy train --config configs/diplomacy_llm_smol.yaml --init-from
pretrained-smol --set train.steps=N --set train.play_processes=P --set run.seed=S`` in a fresh
folder, one torch thread a process, unpinned (the point is the second core): the same seed draws the
same opponents and game seeds on both sides (in bfloat16 a row's rounding depends on the batch it
shares, so the sampled games may part ways; in float32 they are the same games). Runs alternate (1,
2, 1, 2, ...). Printed per step: its wall seconds and the part spent playing (the
``diplomacy.train_step`` event's ``seconds`` and ``play_seconds``), and per run the CPU-seconds of
every process (the trainer and its helpers, from the children's rusage) and the peak RSS of the
largest one. The ratio one / two is the step's speed-up; its limit on an idle 2-core machine is 2
for the playing half and 1 for the training half (one trainer), so the step's limit is ``seconds /
(seconds - play / 2)`` of the one-process run, printed beside it. The first step of a two-process
run includes the helper's start (the model's load). Needs both cores idle to mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(processes: int, args: argparse.Namespace, folder: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "leaguezero.cli",
        "diplomacy",
        "train",
        "--config",
        str(ROOT / "configs" / "diplomacy_llm_smol.yaml"),
        "--out",
        str(folder),
        "--init-from",
        args.init_from,
        "--set",
        f"train.steps={args.steps}",
        "--set",
        f"train.play_processes={processes}",
        "--set",
        f"run.seed={args.seed}",
        "--set",
        "league.eval_every=1000",  # the evaluator's games are not a step's
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{processes} process(es): exit {done.returncode}\n{done.stderr[-2000:]}")
    events = [json.loads(line) for line in (folder / "events.ndjson").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "diplomacy.train_step"]
    return {
        "processes": processes,
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_gb": after.ru_maxrss / 2**20,
        "steps": [(e["step"], e["seconds"], e["play_seconds"], e["records_played"]) for e in steps],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--init-from", default="pretrained-smol")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    rows: dict[int, list[dict]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="play_processes_") as tmp:
        for pair in range(args.pairs):
            for processes in (1, 2):
                row = run_once(processes, args, Path(tmp) / f"p{processes}_{pair}")
                rows[processes].append(row)
                print(
                    f"pair {pair + 1}, {processes} process(es): wall {row['wall_s']:.0f} s, "
                    f"CPU {row['cpu_s']:.0f} s, peak RSS (largest process) "
                    f"{row['peak_rss_gb']:.2f} GiB",
                    flush=True,
                )
                for step, seconds, play, played in row["steps"]:
                    print(
                        f"  step {step}: {seconds:.0f} s, playing {play:.0f} s "
                        f"({played:.0f} answers of the live hero)",
                        flush=True,
                    )
    print("\nstep  one process s  two processes s  speed-up  limit (play halved)")
    for i in range(args.steps):
        one = [r["steps"][i] for r in rows[1]]
        two = [r["steps"][i] for r in rows[2]]
        s1 = statistics.median(s[1] for s in one)
        s2 = statistics.median(s[1] for s in two)
        p1 = statistics.median(s[2] for s in one)
        limit = s1 / (s1 - p1 / 2)
        print(f"{i + 1:>4}  {s1:>13.0f}  {s2:>15.0f}  {s1 / s2:>7.2f}x  {limit:>6.2f}x")


if __name__ == "__main__":
    main()
