"""`leaguezero cluster start/status/stop`: a real Ray head in the background, joined by a driver."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("ray")


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", "cluster", *args],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().split()[2] != "Z"


def test_start_status_join_stop(tmp_path):
    state = ["--state-dir", str(tmp_path)]
    started = _cli("start", "--port", "0", "--num-cpus", "1", *state)
    assert started.returncode == 0, started.stderr
    address, pid = re.search(r"ray head at (\S+) \(pid (\d+)", started.stdout).groups()
    try:
        again = _cli("start", "--port", "0", *state)
        assert again.returncode == 2 and "still runs" in again.stderr
        shown = _cli("status", *state)
        assert shown.returncode == 0 and address in shown.stdout
        assert "1.0 CPU" in shown.stdout  # ray status: the node and its resources
        # A driver joins by address and runs a task there.
        code = (
            f"import ray; ray.init(address={address!r}, log_to_driver=False);"
            "print(ray.get(ray.remote(lambda: 6 * 7).remote()), ray.cluster_resources()['CPU'])"
        )
        joined = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )  # fmt: skip
        assert joined.stdout.split() == ["42", "1.0"], joined.stderr[-2000:]
    finally:
        stopped = _cli("stop", *state)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not _alive(int(pid))
    gone = _cli("status", *state)
    assert gone.returncode == 2 and "no cluster started here" in gone.stderr
    assert "no cluster started here" in _cli("stop", *state).stdout
