"""`llm serve` compiles a request's expression in a bounded worker (issue 41 item 1).

A real server process on loopback, driven with raw HTTP: expressions that would compile for
minutes or take gigabytes (``a{1000}{1000}``, ``(a|b)*a(a|b){20}``, a 60,000-character
``choice``) are refused within the server's bounds while good requests, constrained or not, are
answered beside them; the server's own memory stays flat; a refusal is cached; a compile stops
when its client leaves.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("peft")
pytest.importorskip("outlines_core")

from tests.diplomacy.llm.serve.test_llm_server_hostile import complete, request
from tests.diplomacy.tiny_lm import start_llm_server

TIME_BOUND_S = 3  # --regex-timeout, CPU-seconds of the compile worker
MEMORY_BOUND_MB = 256  # --regex-memory-mb
HOSTILE = [
    {"regex": "a{1000}{1000}"},  # minutes of CPU
    {"regex": "(a|b)*a(a|b){20}"},  # 2**20 DFA states: beyond the memory bound
    {"choice": ["a" * 60_000]},  # ~80 s to compile on one core
]


def status_kb(pid: int, field: str) -> int:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line.split()[1] for line in lines if line.startswith(field + ":")))


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def wait_for(condition, what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition, not a fixed wait


def timed_complete(url: str, structured=None, prompt: str = "A VIE H"):
    fields = {} if structured is None else {"structured_outputs": structured, "max_tokens": 16}
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 2, "temperature": 0, **fields}
    start = time.monotonic()
    # A long client timeout: the bound is the worker's CPU time, and a niced worker on a loaded
    # machine takes many times that in wall time.
    status, body = request(url, "POST", "/v1/completions", body, timeout=1800)
    return status, body, time.monotonic() - start


def test_hostile_expressions_are_refused_in_bounds_beside_good_requests(tiny_lm) -> None:
    bounds = ["--regex-timeout", str(TIME_BOUND_S), "--regex-memory-mb", str(MEMORY_BOUND_MB)]
    proc, url = start_llm_server(tiny_lm, *bounds, "--regex-workers", "4")
    try:
        assert complete(url, "tiny")[0] == 200
        rss_before = status_kb(proc.pid, "VmRSS")
        answers: dict[int, tuple] = {}

        def hostile(index: int) -> None:
            answers[index] = timed_complete(url, HOSTILE[index])

        threads = [threading.Thread(target=hostile, args=(i,)) for i in range(len(HOSTILE))]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(children(proc.pid)) >= len(HOSTILE), "the compile workers")
        # Beside them: an unconstrained request and one with a fresh expression.
        plain = timed_complete(url)
        constrained = timed_complete(url, {"choice": ["A VIE H", "A VIE - BUD"]})
        hostile_busy = len(answers) < len(HOSTILE)
        for thread in threads:
            thread.join(timeout=1800)
        print(f"good beside hostile: plain {plain[2]:.3f} s, constrained {constrained[2]:.3f} s")
        assert plain[0] == 200 and constrained[0] == 200, (plain, constrained)
        assert constrained[1]["choices"][0]["text"] in ("A VIE H", "A VIE - BUD")
        assert hostile_busy  # the good requests really were served while the hostile compiled
        for index, (status, body, elapsed) in sorted(answers.items()):
            message = body["error"]["message"]
            print(f"hostile {json.dumps(HOSTILE[index])[:40]}: {status} in {elapsed:.2f} s")
            assert status == 400 and "\n" not in message and len(message) < 400, message
            assert "more than" in message, message  # the CPU bound or the memory bound
        peak_kb = status_kb(proc.pid, "VmHWM")
        print(f"server RSS before {rss_before // 1024} MB, peak {peak_kb // 1024} MB")
        assert peak_kb - rss_before < 150_000  # the issue saw +3.2 GB
        assert len(children(proc.pid)) <= 4  # --regex-workers
        stats = request(url, "GET", "/stats")[1]
        assert stats["regex_cache_entries"] == 1 and 0 < stats["regex_cache_bytes"] < 1 << 20
        assert stats["regex_refusals_cached"] == 3
        assert stats["rss_bytes"] > stats["regex_cache_bytes"]  # what it holds, reported
        status, body, elapsed = timed_complete(url, HOSTILE[0])  # a refusal is remembered
        # (CPU or memory: which bound a hostile compile meets first depends on the machine)
        assert status == 400 and body["error"]["message"] == answers[0][1]["error"]["message"]
        assert request(url, "GET", "/stats")[1]["regex_compiles"] == stats["regex_compiles"]
        assert complete(url, "tiny")[0] == 200
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_compile_stops_when_its_client_leaves(tiny_lm) -> None:
    proc, url = start_llm_server(tiny_lm, "--regex-timeout", "600")
    parts = urlsplit(url)
    try:
        body = json.dumps(
            {"model": "tiny", "prompt": "A", "structured_outputs": {"regex": "a{1000}{1000}"}}
        ).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{parts.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
        sock.sendall(head.encode() + body)
        wait_for(lambda: children(proc.pid), "the compile worker")
        worker = children(proc.pid)[0]
        sock.close()  # the client leaves long before the 600 s bound
        wait_for(lambda: not Path(f"/proc/{worker}").exists(), "the worker to be stopped", 60)
        assert complete(url, "tiny")[0] == 200
    finally:
        proc.kill()
        proc.wait(timeout=30)
