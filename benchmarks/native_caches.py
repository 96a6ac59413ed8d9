"""oneDNN's per-shape caches, capped (``leaguezero.common.memory.bound_native_caches``) against
torch's defaults: memory kept and CPU time, as interleaved pairs of fresh processes.

    python benchmarks/native_caches.py [--pairs 3] [--entries 256]

Each child builds SmolLM2-135M's four linear shapes (576 -> 1536, 1536 -> 576, 576 -> 576,
576 -> 192) in bfloat16, frozen, as the LLM hero's base, then runs two workloads:

- **training**: a forward and backward pass at each of 300 row counts (one GRPO record a pass,
  every prompt a new length), the resident memory it leaves behind (after ``malloc_trim``) and
  its CPU time;
- **decoding**: 40 rounds of forwards at 1..28 rows (a sampling batch's shapes, reused every
  step): CPU time, where a cache too small would rebuild primitives.

A (``default``) runs with the variables unset (oneDNN's 1,024 entries), B (``capped``) with
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` and ``LRU_CACHE_CAPACITY`` at ``--entries``. No physical
limit applies to the memory figure; the CPU ratio B / A is the cost of the cap (1.0: none).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, json, time, psutil, torch
torch.set_num_threads(1)
torch.manual_seed(0)
shapes = [(576, 1536), (1536, 576), (576, 576), (576, 192)]
layers = [torch.nn.Linear(i, o, bias=False).bfloat16().requires_grad_(False) for i, o in shapes]
process = psutil.Process()
trim = ctypes.CDLL("libc.so.6").malloc_trim
trim(0)
before = process.memory_info().rss
started = time.process_time()
for rows in range(300, 600):
    loss = 0
    for layer in layers:
        x = torch.randn(rows, layer.in_features, dtype=torch.bfloat16, requires_grad=True)
        loss = loss + layer(x).float().sum()
    loss.backward()
train_cpu = time.process_time() - started
trim(0)
kept = process.memory_info().rss - before
started = time.process_time()
with torch.no_grad():
    for _ in range(40):
        for rows in range(1, 29):
            for layer in layers:
                layer(torch.ones(rows, layer.in_features, dtype=torch.bfloat16))
decode_cpu = time.process_time() - started
print(json.dumps({"kept_mb": kept / 1e6, "train_cpu": train_cpu, "decode_cpu": decode_cpu}))
"""

VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def child(entries: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env["OMP_NUM_THREADS"] = "1"
    if entries is not None:
        env.update(dict.fromkeys(VARIABLES, str(entries)))
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--entries", type=int, default=256)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {"train_cpu": [], "decode_cpu": []}
    for pair in range(1, args.pairs + 1):
        a, b = child(None), child(args.entries)
        for key in ratios:
            ratios[key].append(b[key] / a[key])
        print(
            f"pair {pair}: kept default {a['kept_mb']:.0f} MB, capped {b['kept_mb']:.0f} MB; "
            f"training CPU {a['train_cpu']:.2f} / {b['train_cpu']:.2f} s, decoding CPU "
            f"{a['decode_cpu']:.2f} / {b['decode_cpu']:.2f} s",
            flush=True,
        )
    for key, values in ratios.items():
        print(
            f"{key} capped / default: median {statistics.median(values):.3f} "
            f"(min {min(values):.3f}, max {max(values):.3f}, {len(values)} pairs)"
        )


if __name__ == "__main__":
    main()
