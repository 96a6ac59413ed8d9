"""`llm serve` against hostile `structured_outputs` expressions, beside good requests (issue 41).

Starts ``leaguezero llm serve`` on a tiny model built on the spot, sends each hostile expression
(from its own thread, with a client timeout), and while they compile sends an unconstrained and
a constrained good request. Prints each answer's status and time, the good requests' times, the
server's RSS before and its peak (VmHWM), and the server's CPU-seconds in the seconds after the
hostile clients are gone (a compile that outlives its request shows up there). Not a test.

    OMP_NUM_THREADS=1 python benchmarks/llm_serve_hostile_regex.py [--server-args "..."]

Against an older leaguezero, set PYTHONPATH to its ``src`` and pass ``--server-args ""``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

# Run as a script, this folder would shadow the `diplomacy` engine package; the repository
# root gives tests.diplomacy.tiny_lm.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.diplomacy.tiny_lm import build_tiny_lm, start_llm_server  # noqa: E402

HOSTILE = [{"regex": "a{1000}{1000}"}, {"regex": "(a|b)*a(a|b){20}"}, {"choice": ["a" * 60_000]}]


def status_kb(pid: int, field: str) -> int:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line.split()[1] for line in lines if line.startswith(field + ":")))


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(url: str, structured, timeout: float) -> tuple[str, float]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    body = {"model": "tiny", "prompt": "A VIE H", "max_tokens": 16, "temperature": 0}
    if structured is not None:
        body["structured_outputs"] = structured
    start = time.monotonic()
    try:
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        return str(conn.getresponse().status), time.monotonic() - start
    except (TimeoutError, OSError) as err:
        return f"no answer ({type(err).__name__})", time.monotonic() - start
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-args", default="--regex-timeout 3 --regex-workers 4")
    parser.add_argument("--client-timeout", type=float, default=60.0)
    parser.add_argument("--after-s", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_llm_server(build_tiny_lm(tmp), *shlex.split(args.server_args))
        try:
            post(url, None, 60)  # warm
            rss = status_kb(proc.pid, "VmRSS")
            answers: dict[int, tuple[str, float]] = {}

            def hostile(i: int) -> None:
                answers[i] = post(url, HOSTILE[i], args.client_timeout)

            threads = [threading.Thread(target=hostile, args=(i,)) for i in range(len(HOSTILE))]
            for thread in threads:
                thread.start()
            time.sleep(0.5)  # let the hostile requests reach the server first
            plain = post(url, None, 60)
            constrained = post(url, {"choice": ["A VIE H", "A VIE - BUD"]}, 60)
            for thread in threads:
                thread.join()
            busy = cpu_s(proc.pid)
            time.sleep(args.after_s)  # measuring what the server does with nobody asking
            after = cpu_s(proc.pid) - busy
            for i, (status, took) in sorted(answers.items()):
                print(f"hostile {json.dumps(HOSTILE[i])[:36]:36s} {status} in {took:.2f} s")
            print(f"beside them: plain {plain[0]} in {plain[1]:.3f} s, "
                  f"constrained {constrained[0]} in {constrained[1]:.3f} s")  # fmt: skip
            print(f"server RSS before {rss // 1024} MB, peak {status_kb(proc.pid, 'VmHWM') // 1024}"
                  f" MB; CPU-s in the {args.after_s:g} s after: {after:.1f}")  # fmt: skip
        finally:
            proc.kill()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
