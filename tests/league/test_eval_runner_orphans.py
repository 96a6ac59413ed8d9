"""Spawned workers (league evaluations, Yatzy self-play) end with the run that started them: a run
killed outright (SIGKILL here) leaves no worker going on beside the run that resumes it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = r"""
import multiprocessing as mp, os, sys, time
from leaguezero.common.processes import run_child
if __name__ == "__main__":
    child = mp.get_context("spawn").Process(target=run_child, args=(time.sleep, os.getpid(), 600))
    child.start()
    with open(sys.argv[1], "w") as f:
        f.write(str(child.pid))
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state  # a zombie has ended; only its parent's reaping is left


def test_a_job_process_ends_when_its_parent_is_killed(tmp_path) -> None:
    if not sys.platform.startswith("linux"):
        import pytest

        pytest.skip("reads /proc")
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    try:
        deadline = time.monotonic() + 300
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert _running(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(60)
        deadline = time.monotonic() + 120
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(child)
    finally:
        parent.kill()
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
