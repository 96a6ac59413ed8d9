"""CPU time of a ``yz run``, with snapshots of its best network.

    python scripts/figures/cpu_monitor.py PID RUN

Every 20 s appends ``{"wall", "cpu", "iterations"}`` to ``RUN/cpu.ndjson`` (CPU seconds of the
process PID and its direct children, iterations finished), and every 600 CPU-seconds copies
``RUN/models/best.pt`` to ``RUN/snapshots/best_cpuSSSSSS_itIIII.pt`` for
``scripts/figures/strength_curve.py``. Stops when PID exits. Linux only (reads /proc).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SNAPSHOT_EVERY_S = 600


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, own + waited-for children) of ``root`` and its children."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == root or int(fields[1]) == root:
            total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def iterations(run: Path) -> int:
    try:
        with open(run / "logs" / "iteration_stats.ndjson") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def main() -> None:
    pid, run = int(sys.argv[1]), Path(sys.argv[2])
    t0, next_snapshot = time.time(), 0.0
    while os.path.exists(f"/proc/{pid}"):
        cpu, its = tree_cpu(pid), iterations(run)
        if run.exists():
            with open(run / "cpu.ndjson", "a") as fh:
                row = {"wall": round(time.time() - t0, 1), "cpu": round(cpu, 1), "iterations": its}
                fh.write(json.dumps(row) + "\n")
        best = run / "models" / "best.pt"
        if cpu >= next_snapshot and best.exists():
            (run / "snapshots").mkdir(exist_ok=True)
            shutil.copyfile(best, run / "snapshots" / f"best_cpu{int(cpu):06d}_it{its:04d}.pt")
            next_snapshot = cpu + SNAPSHOT_EVERY_S
        time.sleep(20)


if __name__ == "__main__":
    main()
