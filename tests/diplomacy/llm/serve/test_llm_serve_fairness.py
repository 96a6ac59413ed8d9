"""``llm serve`` shares its compile workers fairly between local users (issue 54 item 5).

Another uid (``nobody``, from processes of its own: real sockets to a real server) sends two
expressions that each take the whole CPU bound, the first held on the one worker (its process
stopped, so the order does not depend on the machine's speed); a good client of this uid
arriving after them is served at once (the spare worker), before the other uid's backlog —
where one shared queue served it last. Needs root (to be another uid); the ordering within one
process is tested without it in ``test_llm_regex_sandbox.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

pytest.importorskip("peft")
pytest.importorskip("outlines_core")

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.serve.regex_sandbox import CompileLimits
from leaguezero.diplomacy.llm.serve.server import LLMServer
from tests.diplomacy.llm.serve.test_llm_regex_sandbox import workers_stopped
from tests.diplomacy.llm.serve.test_llm_server_hostile import complete

OTHER_UID = 65534  # nobody
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("python3", path="/usr/bin:/bin") is None,
    reason="needs root (to be another user) and a system python3",
)


# The other user's client: a fresh interpreter (not a fork of this threaded process) that
# other users can run (this one may live under an owner-only home).
CLIENT = """
import socket, sys
port, regex = int(sys.argv[1]), sys.argv[2]
body = '{"model": "tiny", "prompt": "A", "structured_outputs": {"regex": "%s"}}' % regex
head = ("POST /v1/completions HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n"
        "Content-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n"
        % (port, len(body)))
sock = socket.create_connection(("127.0.0.1", port), timeout=1800)
sock.sendall((head + body).encode())
answer = b""
while b"\\r\\n" not in answer:
    chunk = sock.recv(4096)
    if not chunk:
        break
    answer += chunk
print(answer.split(b"\\r\\n", 1)[0].decode() or "no answer")
"""
OTHER_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


def post_as_other_user(port: int, regex: str) -> subprocess.Popen:
    """A process of ``OTHER_UID`` posting one constrained completion; prints the status line."""
    return subprocess.Popen(
        [OTHER_PYTHON, "-c", CLIENT, str(port), regex],
        user=OTHER_UID,
        group=OTHER_UID,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling a condition, not a fixed wait


def test_another_users_backlog_does_not_hold_back_a_new_client(tiny_lm) -> None:
    backend = HFBackend.from_pretrained(tiny_lm, model_name="tiny")
    limits = CompileLimits(time_s=0.3, workers=1)
    server = LLMServer(backend, compile_limits=limits).start()
    port = server.httpd.server_address[1]
    children = []
    try:

        def pending() -> int:
            if not server.regex_sandbox_started:
                return 0
            stats = server.sandbox.cache_stats()
            return stats["regex_compiles_running"] + stats["regex_compiles_waiting"]

        children.append(post_as_other_user(port, "a{1000}{1000}"))
        with workers_stopped():  # its first compile holds the one worker throughout
            children.append(post_as_other_user(port, "b{1000}{1000}"))
            wait_for(lambda: pending() == 2, "the other user's second compile to be queued")
            choice = {"choice": ["A VIE H"]}
            status, body = complete(server.url, "tiny", structured_outputs=choice, max_tokens=16)
            assert status == 200 and body["choices"][0]["text"] == "A VIE H"
            before_backlog = list(server.sandbox._slots.grant_log)
        answers = [child.communicate(timeout=1800)[0].strip() for child in children]
        grants = list(server.sandbox._slots.grant_log)
        print(f"grant order: {grants}; the other user's answers: {answers}")
        assert all(" 400 " in answer for answer in answers), answers  # over the CPU bound
        assert before_backlog == [f"uid {OTHER_UID}", f"uid {os.getuid()}"]
        assert grants == [f"uid {OTHER_UID}", f"uid {os.getuid()}", f"uid {OTHER_UID}"]
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=60)
        server.shutdown()
