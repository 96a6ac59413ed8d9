"""A good client's fresh expressions while another user floods `llm serve`'s compile workers
(issue 54 item 5: two hostile connections delayed everyone's new expressions from 0.03-0.13 s
to 17.6-17.9 s; with four, a good request got 503).

Starts ``leaguezero llm serve`` on a tiny model built on the spot; ``--hostile`` forked children
become uid ``nobody`` (so this needs root) and each sends fresh explosive expressions back to
back (each runs to the compile bound); meanwhile this uid sends ``--good`` constrained requests,
each with a fresh small ``choice``, one after another. Prints each good request's status and
time. Not a test (tests/diplomacy/llm/serve/test_llm_serve_fairness.py is).

    OMP_NUM_THREADS=1 python benchmarks/llm_serve_fair_regex.py [--server-args "..."]

Against an older leaguezero, set PYTHONPATH to its ``src``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.diplomacy.tiny_lm import build_tiny_lm, start_llm_server  # noqa: E402

NOBODY = 65534


def post(url: str, structured: dict, timeout: float = 600) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    body = {"model": "tiny", "prompt": "A VIE H", "max_tokens": 2, "temperature": 0,
            "structured_outputs": structured}  # fmt: skip
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})  # fmt: skip
    return conn.getresponse().status


def hostile_child(url: str, seed: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        for n in range(10**6):
            post(url, {"regex": f"a{{1000}}{{{1000 + 1000 * seed + n}}}"})
    finally:
        os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hostile", type=int, default=2)
    parser.add_argument("--good", type=int, default=5)
    parser.add_argument("--server-args", default="--regex-workers 2 --regex-timeout 10")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the hostile clients become uid nobody")
    with tempfile.TemporaryDirectory() as folder:
        model = build_tiny_lm(Path(folder) / "tiny")
        proc, url = start_llm_server(model, *shlex.split(args.server_args))
        children = []
        try:
            print(f"warm: {post(url, {'choice': ['A VIE H']})}")
            children = [hostile_child(url, seed) for seed in range(args.hostile)]
            time.sleep(3)  # a benchmark: let the hostile compiles take the workers
            for n in range(args.good):
                start = time.monotonic()
                status = post(url, {"choice": [f"A VIE H {n}", f"A VIE - BUD {n}"]})
                print(f"good request {n}: {status} in {time.monotonic() - start:.2f} s")
        finally:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            proc.kill()


if __name__ == "__main__":
    main()
