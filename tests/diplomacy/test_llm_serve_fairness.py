"""``llm serve`` shares its compile workers fairly between local users (issue 54 item 5).

Another uid (``nobody``, from forked children: real sockets to a real server) sends two
expressions that each take the whole CPU bound; a good client of this uid arriving after them
gets the one worker next, before the other uid's backlog — where one shared queue served it
last. Needs root (to be another uid); the ordering within one process is tested without it in
``test_llm_regex_sandbox.py``.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

pytest.importorskip("peft")
pytest.importorskip("outlines_core")

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.serve.regex_sandbox import CompileLimits
from leaguezero.diplomacy.llm.serve.server import LLMServer
from tests.diplomacy.test_llm_server_hostile import complete

OTHER_UID = 65534  # nobody
pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to be another user"
)


def post_as_other_user(port: int, regex: str) -> tuple[int, int]:
    """Fork a child that becomes ``OTHER_UID`` and posts one constrained completion; returns
    (pid, the read end of a pipe that gets the answer's status line)."""
    body = json.dumps({"model": "tiny", "prompt": "A", "structured_outputs": {"regex": regex}})
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls until _exit
        try:
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            sock = socket.create_connection(("127.0.0.1", port), timeout=600)
            sock.sendall((head + body).encode())
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            os.write(write_end, answer.split(b"\r\n", 1)[0] or b"no answer")
        finally:
            os._exit(0)
    os.close(write_end)
    return pid, read_end


def wait_for(condition, what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling a condition, not a fixed wait


def test_another_users_backlog_does_not_hold_back_a_new_client(tiny_lm) -> None:
    backend = HFBackend.from_pretrained(tiny_lm, model_name="tiny")
    limits = CompileLimits(time_s=0.5, workers=1)
    server = LLMServer(backend, compile_limits=limits).start()
    port = server.httpd.server_address[1]
    children = []
    try:

        def pending() -> int:
            if not server.regex_sandbox_started:
                return 0
            stats = server.sandbox.cache_stats()
            return stats["regex_compiles_running"] + stats["regex_compiles_waiting"]

        for n, regex in enumerate(("a{1000}{1000}", "b{1000}{1000}"), start=1):
            children.append(post_as_other_user(port, regex))
            wait_for(lambda n=n: pending() == n, "the other user's compile to be queued")
        choice = {"choice": ["A VIE H"]}
        status, body = complete(server.url, "tiny", structured_outputs=choice, max_tokens=16)
        assert status == 200 and body["choices"][0]["text"] == "A VIE H"
        answers = []
        for pid, read_end in children:
            os.waitpid(pid, 0)
            answers.append(os.read(read_end, 200).decode())
            os.close(read_end)
        grants = list(server.sandbox._slots.grant_log)
        print(f"grant order: {grants}; the other user's answers: {answers}")
        assert all(" 400 " in answer for answer in answers), answers  # over the CPU bound
        assert grants == [f"uid {OTHER_UID}", f"uid {os.getuid()}", f"uid {OTHER_UID}"]
    finally:
        server.shutdown()
