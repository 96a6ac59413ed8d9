"""Peak memory of an LLM lockstep group with glibc's malloc arenas capped
(``leaguezero.common.memory.bound_malloc_arenas``, what the LLM runtime does) against glibc's
default, as interleaved pairs of fresh processes.

    python benchmarks/llm_arenas.py [--pairs 2] [--games 4] [--years 1]

Each child is ``leaguezero diplomacy eval --hero pretrained-smol --opponents pretrained-smol
--games G --concurrent-games G --set max_years=Y --set llm.mode=constrained --no-save``: G games
in threads, every seat an LLM row, so the sampling half of a GRPO step whose pool seats LLM
agents everywhere. A (``default``) runs with ``MALLOC_ARENA_MAX`` exported at glibc's own limit
(8 a core; the runtime then leaves it alone), B (``capped``) without it (the runtime caps the
arenas at ``MALLOC_ARENAS``). Prints each child's peak RSS and CPU seconds and the B / A ratios
(min / median / max); both play the same games (the results are compared). No physical limit
applies; the budget the issue sets is 4 GB for a GRPO step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import atexit, resource, sys
def report():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print("CHILD", usage.ru_maxrss, usage.ru_utime + usage.ru_stime, file=sys.stderr)
atexit.register(report)
from leaguezero.cli import main
sys.argv = ["leaguezero", *sys.argv[1:]]
main()
"""


def run(mode: str, games: int, years: int, seed: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env.setdefault("OMP_NUM_THREADS", "1")
    if mode == "default":
        env["MALLOC_ARENA_MAX"] = str(8 * (os.cpu_count() or 1))
    args = ["diplomacy", "eval", "--hero", "pretrained-smol", "--opponents", "pretrained-smol"]
    args += ["--games", str(games), "--concurrent-games", str(games), "--seed", str(seed)]
    args += ["--set", f"max_years={years}", "--set", "llm.mode=constrained", "--no-save"]
    args += ["--json"]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, check=True
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("CHILD "))
    _, maxrss_kb, cpu = line.split()
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "mode": mode,
        "peak_gb": round(int(maxrss_kb) / 2**20, 2),
        "cpu_s": round(float(cpu), 1),
        "result": (summary["hero"]["wins"], summary["opponents"]["pretrained-smol"]["wins"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--years", type=int, default=1)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for pair in range(args.pairs):
        for mode in ("default", "capped"):
            row = run(mode, args.games, args.years, args.seed)
            rows.append(row)
            print(json.dumps({"pair": pair + 1, **row}), flush=True)
    for key in ("peak_gb", "cpu_s"):
        a = [r[key] for r in rows if r["mode"] == "default"]
        b = [r[key] for r in rows if r["mode"] == "capped"]
        ratios = [y / x for x, y in zip(a, b, strict=True)]
        print(
            f"{key}: capped / default min {min(ratios):.2f} median "
            f"{statistics.median(ratios):.2f} max {max(ratios):.2f} "
            f"(default {statistics.median(a)}, capped {statistics.median(b)})"
        )
    same = len({tuple(r["result"]) for r in rows}) == 1
    print(f"same results in every child: {same}")


if __name__ == "__main__":
    main()
