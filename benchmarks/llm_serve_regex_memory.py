"""`llm serve`'s memory over many distinct constrained requests, against what it reports
(issue 54 item 9: the server grew 373 -> 735 MB while `/stats` reported a 107 MB cache).

Starts ``leaguezero llm serve`` on a tiny model built on the spot and sends ``--requests``
constrained completions, each with a fresh ``choice`` list of ``--options`` order-like lines
(``--concurrency`` at once, so the cache fills and evicts), then prints the server's RSS
(``/proc``) before and after and the cache's bytes as ``/stats`` reports them. Not a test.

    OMP_NUM_THREADS=1 python benchmarks/llm_serve_regex_memory.py [--server-args "..."]

Against an older leaguezero, set PYTHONPATH to its ``src``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shlex
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.diplomacy.tiny_lm import build_tiny_lm, start_llm_server  # noqa: E402

PROVINCES = ["VIE", "BUD", "TRI", "GAL", "BOH", "TYR", "SER", "RUM", "ALB", "GRE", "ADR", "ION"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(url: str, path: str) -> dict:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    conn.request("GET", path)
    return json.loads(conn.getresponse().read())


def post(url: str, options: list[str]) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    body = {"model": "tiny", "prompt": "A VIE H", "max_tokens": 2, "temperature": 0,
            "structured_outputs": {"choice": options}}  # fmt: skip
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})  # fmt: skip
    return conn.getresponse().status


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--options", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--server-args", default="--regex-workers 2")
    args = parser.parse_args()
    rng = random.Random(0)

    def fresh_choice(seed: int) -> list[str]:
        return [
            f"A {rng.choice(PROVINCES)} - {rng.choice(PROVINCES)} {seed} {k}"
            for k in range(args.options)
        ]

    with tempfile.TemporaryDirectory() as folder:
        model = build_tiny_lm(Path(folder) / "tiny")
        proc, url = start_llm_server(model, *shlex.split(args.server_args))
        try:
            post(url, ["A VIE H"])
            before = rss_mb(proc.pid)
            choices = [fresh_choice(n) for n in range(args.requests)]
            with ThreadPoolExecutor(args.concurrency) as pool:
                statuses = list(pool.map(lambda c: post(url, c), choices))
            after = rss_mb(proc.pid)
            stats = get(url, "/stats")
            reported = stats.get("regex_cache_bytes", 0) / 2**20
            print(f"{len(statuses)} requests, {statuses.count(200)} answered 200; cache "
                  f"{stats.get('regex_cache_entries')} entries")  # fmt: skip
            print(f"server RSS {before:.0f} -> {after:.0f} MB (+{after - before:.0f} MB); "
                  f"/stats regex_cache_bytes {reported:.1f} MB; /stats rss_bytes "
                  f"{stats.get('rss_bytes', 0) / 2**20:.0f} MB")  # fmt: skip
        finally:
            proc.kill()


if __name__ == "__main__":
    main()
