"""Hostile ``.gguf`` bases (issue 54 item 6): how each command that takes a GGUF path answers.

Builds tiny hand-made files whose header lies (a KV count of 2^63, a key length of 2^60, an
array of 2^40 strings, a truncated file, 3,000,000 empty vocabulary strings) and runs
``leaguezero llm serve --base-model FILE`` and ``leaguezero diplomacy eval --hero FILE`` on
each in a subprocess under a CPU-time limit, printing: exit code, lines of output, whether a
traceback showed, the child's CPU seconds and peak RSS. Then times the header check against
hashing a large sparse file (``--big-gb``), which a bad header no longer waits for.

    python benchmarks/gguf_hostile.py [--cpu-limit 20] [--big-gb 2]

Not a pass/fail test (the fast asserts are tests/diplomacy/llm/model/test_llm_gguf_hostile.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "diplomacy"))
from gguf_bytes import hostile_files


def run(argv: list[str], cpu_limit: int, env: dict) -> dict:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit))

    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, text=True, preexec_fn=limit, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        out = log.read().strip()
    return {
        "rc": proc.returncode,
        "lines": len(out.splitlines()),
        "traceback": "Traceback" in out,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "maxrss_mb": usage.ru_maxrss / 1024,
        "last": out.splitlines()[-1][:150] if out else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-limit", type=int, default=20)
    parser.add_argument("--big-gb", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {**os.environ, "LEAGUEZERO_CACHE": str(folder / "cache")}
        for name, data in hostile_files().items():
            path = folder / f"{name}.gguf"
            path.write_bytes(data)
            for command in (
                ["llm", "serve", "--base-model", str(path), "--port", "0"],
                [
                    "diplomacy",
                    "eval",
                    "--hero",
                    str(path),
                    "--opponents",
                    "random_bot",
                    "--games",
                    "1",
                    "--no-save",
                ],
            ):
                res = run([sys.executable, "-m", "leaguezero", *command], args.cpu_limit, env)
                print(
                    f"{name:>16} {command[0]} {command[1]:<5} rc {res['rc']:>4}  "
                    f"{res['lines']:>3} lines  traceback {res['traceback']!s:<5}  "
                    f"{res['cpu_s']:6.2f} CPU-s  peak RSS {res['maxrss_mb']:7.0f} MB  "
                    f"| {res['last']}",
                    flush=True,
                )
        # A big file whose header is bad: refused before it is hashed (before the fix it was
        # hashed first, then handed to the gguf package).
        big = folder / "big.gguf"
        with big.open("wb") as f:
            f.write(hostile_files()["kv_count_2e63"])
            f.truncate(int(args.big_gb * (1 << 30)))
        code = (
            "import sys; from leaguezero.diplomacy.llm.model import gguf\n"
            "try: gguf.base_model_folder(sys.argv[1])\n"
            "except Exception as err: print(type(err).__name__, str(err)[:120])"
        )
        res = run([sys.executable, "-c", code, str(big)], args.cpu_limit, env)
        print(
            f"{args.big_gb:g} GB file, bad header: rc {res['rc']}, {res['cpu_s']:.2f} CPU-s | "
            f"{res['last']}"
        )
        start = time.process_time()
        from leaguezero.diplomacy.llm.model import gguf

        gguf.file_digest(big)
        print(f"{args.big_gb:g} GB file: hashing alone {time.process_time() - start:.2f} CPU-s")


if __name__ == "__main__":
    main()
