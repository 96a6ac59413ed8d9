"""A spawned child that shows a progress bar and is then stopped by ``terminate()`` (an
interrupted run's league evaluation or play helper, mid-way through loading a model) leaves no
named semaphore for the resource tracker to report as leaked."""

from __future__ import annotations

import subprocess
import sys

PARENT = r"""
import multiprocessing as mp, os, sys, time
from leaguezero.common.processes import run_child

def show_a_bar_then_wait(conn):
    from tqdm.auto import tqdm
    for _ in tqdm(range(3), desc="loading"):
        pass
    conn.send("ready")
    time.sleep(600)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    target = show_a_bar_then_wait if sys.argv[1] == "plain" else run_child
    args = (theirs,) if sys.argv[1] == "plain" else (show_a_bar_then_wait, os.getpid(), theirs)
    child = ctx.Process(target=target, args=args)
    child.start()
    assert ours.poll(300), "the child never showed its bar"
    ours.recv()
    child.terminate()
    child.join(60)
    print("exitcode", child.exitcode)
"""


def _stop_a_child(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    return subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=600
    )


def test_a_terminated_child_leaks_no_semaphore(tmp_path) -> None:
    done = _stop_a_child(tmp_path, "run_child")
    assert done.returncode == 0, done.stderr
    assert "exitcode -15" in done.stdout  # still a SIGTERM death: callers read it as such
    assert "leaked semaphore" not in done.stderr, done.stderr


def test_the_check_sees_the_leak_of_a_plain_child(tmp_path) -> None:
    # The same child without run_child: tqdm's multiprocessing lock is left behind, which is
    # what the test above would see if the fix went.
    done = _stop_a_child(tmp_path, "plain")
    assert done.returncode == 0, done.stderr
    assert "leaked semaphore" in done.stderr
