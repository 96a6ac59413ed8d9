"""`leaguezero web` as a user starts it: a real process on 127.0.0.1 serving the pages and the
runs given with --run; a bad --run is one line, not a traceback."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.web.conftest import DEADLINE_S, free_port

pytest.importorskip("uvicorn", reason="the web extra is not installed")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_the_command_serves_pages_and_runs_on_localhost(tmp_path):
    from tests.web.fake_runs import make_league_run

    run = make_league_run(tmp_path / "my_league")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "web", "--port", str(port), "--run", str(run)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        page = None
        while page is None:  # poll until it answers (or dies, or the deadline passes)
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the server did not answer"
            page = _get(f"http://127.0.0.1:{port}/yatzy")
            if page is None:
                time.sleep(0.1)
        assert b"<html" in page
        runs = json.loads(_get(f"http://127.0.0.1:{port}/api/runs") or b"{}")
        assert [r["name"] for r in runs["runs"]] == ["my_league"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=DEADLINE_S)
    assert f"serving on http://127.0.0.1:{port}/" in out
    assert "Traceback" not in out


def test_serving_on_is_printed_once_the_socket_accepts(tmp_path):
    """The "serving on" line is a promise: a connection made the moment it is read succeeds,
    with no retry (it used to come before the app was built and uvicorn listened)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "leaguezero", "web", "--port", str(port)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
        deadline = time.monotonic() + DEADLINE_S
        seen = []
        while not any("serving on" in line for line in seen):
            assert proc.poll() is None or not lines.empty(), "".join(seen)
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        address = seen[-1].split("serving on ")[1].split()[0]
        assert address == f"http://127.0.0.1:{port}/"
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S):
            pass  # accepted: refused (ConnectionRefusedError) before the fix
        assert b"<html" in (_get(address + "yatzy") or b"")
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)


def test_a_missing_run_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "leaguezero", "web", "--run", str(tmp_path / "nope")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode != 0
    assert "--run: no such directory" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_web_sets_one_torch_thread_for_its_agents(monkeypatch):
    """The agents run in the app's process: one torch thread unless --threads says more."""
    import torch
    from typer.testing import CliRunner

    from leaguezero.cli import app
    from leaguezero.web import app as web_app

    seen = []
    monkeypatch.setattr(
        web_app, "serve", lambda host, port, settings, on_ready=None: seen.append(port)
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        result = CliRunner().invoke(app, ["web", "--port", "8999"])
        assert result.exit_code == 0, result.output
        assert seen == [8999] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
