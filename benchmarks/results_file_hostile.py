"""``diplomacy eval --results FILE`` on hostile paths (issue 54 item 8): a FIFO, /dev/full, a
symlink planted in a sticky shared folder, and a disk that fills after the file was opened
(RLIMIT_FSIZE). For each: exit status, lines of stderr, whether a traceback showed, whether
the report was printed, and what reached the file (or the link's target).

    python benchmarks/results_file_hostile.py [--hang-s 30]

Run on an older checkout (PYTHONPATH=old/src) for the "before" column.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = ["--hero", "random_bot", "--opponents", "random_bot", "--games", "1"]
TINY += ["--set", "max_years=1", "--no-save", "--json"]


def run(results: str, hang_s: float, preexec_fn=None) -> str:
    argv = [sys.executable, "-m", "leaguezero", "diplomacy", "eval", *TINY, "--results", results]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=hang_s, preexec_fn=preexec_fn
        )
    except subprocess.TimeoutExpired as err:
        played = "1/1 games" in (err.stderr or b"").decode(errors="replace")
        return f"still blocked after {hang_s:g} s (killed), a game finished: {played}"
    err = proc.stderr.strip()
    return (
        f"rc {proc.returncode}, {len(err.splitlines())} stderr lines, traceback "
        f"{'Traceback' in err}, report printed {bool(proc.stdout)}"
        f" | {err.splitlines()[-1][:120] if err else ''}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hang-s", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        fifo = folder / "results.fifo"
        os.mkfifo(fifo)
        print("FIFO:", run(str(fifo), args.hang_s), flush=True)
        print("/dev/full:", run("/dev/full", args.hang_s), flush=True)
        shared = folder / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        victim = folder / "victim.txt"
        victim.write_text("precious\n")
        (shared / "games.ndjson").symlink_to(victim)
        outcome = run(str(shared / "games.ndjson"), args.hang_s)
        print(f"planted symlink: {outcome}; victim grew by {victim.stat().st_size - 9} bytes")
        full = folder / "games.ndjson"
        full.write_text("x" * 63 + "\n")

        def full_disk() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

        print("disk full after the open:", run(str(full), args.hang_s, full_disk), flush=True)


if __name__ == "__main__":
    main()
