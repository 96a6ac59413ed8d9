"""A local Ray head node that ``leaguezero cluster start/status/stop`` manage.

``start`` runs ``ray start --head --block`` as a detached process of its own session and records
its process id and cluster address in ``STATE_DIR/cluster.json`` (versioned, written
atomically); ``stop`` sends that process SIGTERM, which makes Ray drain and stop the node's
processes, and so stops only the cluster this tool started — never other Ray instances on the
machine (``ray stop`` would end them all). ``status`` asks ``ray status`` about the address.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from leaguezero.common.atomic import atomic_write_json

STATE_VERSION = 1
_ADDRESS = re.compile(r"ray start --address='([^']+)'")
RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")  # where `ray start` notes its address


class ClusterError(RuntimeError):
    """A cluster command that cannot be carried out; the message says what to do."""


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    pid: int
    log: str
    started_at: float


def default_state_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("leaguezero")) / "cluster"


def _ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def read_state(state_dir: Path) -> ClusterInfo | None:
    """The recorded cluster, or None; raises :class:`ClusterError` on a foreign format."""
    path = state_dir / "cluster.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("schema_version") != STATE_VERSION:
        raise ClusterError(f"{path} has an unknown schema_version; delete it if no cluster runs")
    return ClusterInfo(data["address"], data["pid"], data["log"], data["started_at"])


def _loopback_address(log_text: str, node_ip: str, port: int) -> str:
    """The head's address when `ray start` printed no `--address=` hint (loopback heads)."""
    found = re.search(r"new instance at ([0-9.]+:\d+)", log_text)
    return found.group(1) if found else f"{node_ip}:{port}"


def _free_port(node_ip: str) -> int:
    """A port free on ``node_ip`` now, for a head asked to take "any free port".

    Ray's own choice for ``--port 0`` is noted only in a machine-wide file
    (``/tmp/ray/ray_current_cluster``) that may be missing when the head says it started, or
    belong to another head started at the same time; a port chosen here is known exactly.
    """
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((node_ip, 0))
        return probe.getsockname()[1]


def start_head(
    state_dir: Path,
    *,
    port: int = 6379,
    num_cpus: int | None = None,
    node_ip: str = "127.0.0.1",
    timeout_s: float = 120.0,
) -> ClusterInfo:
    """Start a Ray head node in the background; returns its address once it accepts drivers.

    Raises:
        ClusterError: a cluster from this state directory still runs, or the head did not come
            up within ``timeout_s`` (the message quotes its log).
    """
    from leaguezero.distributed.runtime import require_ray

    require_ray()
    state_dir.mkdir(parents=True, exist_ok=True)
    current = read_state(state_dir)
    if current is not None and _alive(current.pid):
        raise ClusterError(
            f"a cluster started here still runs at {current.address} (pid {current.pid}); "
            "run `leaguezero cluster stop` first"
        )
    log_path = state_dir / "head.log"
    if port == 0:
        port = _free_port(node_ip)
    cmd = [*_ray_cli(), "start", "--head", "--block", "--port", str(port),
           "--node-ip-address", node_ip, "--include-dashboard", "false",
           "--disable-usage-stats"]  # fmt: skip
    if num_cpus is not None:
        cmd += ["--num-cpus", str(num_cpus)]
    # A head bound to this machine only needs no auth token; set RAY_AUTH_MODE yourself for
    # a head that other machines join (docs/guides/cluster.md).
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    if node_ip in ("127.0.0.1", "localhost"):
        # Without this Ray binds the machine's network address even when told 127.0.0.1.
        env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,  # survives this command; its own process group
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        match = _ADDRESS.search(text)
        if match or "Ray runtime started" in text:
            # A loopback-only head does not print the `ray start --address=...` hint; it
            # listens on the address and port it was given.
            address = match.group(1) if match else _loopback_address(text, node_ip, port)
            info = ClusterInfo(address, proc.pid, str(log_path), time.time())
            atomic_write_json(
                state_dir / "cluster.json", {"schema_version": STATE_VERSION, **asdict(info)}
            )
            return info
        if proc.poll() is not None:
            raise ClusterError(f"ray start exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.2)
    proc.terminate()
    raise ClusterError(f"the Ray head did not come up in {timeout_s:.0f} s; see {log_path}")


def status(state_dir: Path, timeout_s: float = 60.0) -> tuple[ClusterInfo, str]:
    """The recorded cluster and ``ray status`` for it.

    Raises:
        ClusterError: no cluster was started from ``state_dir``, or it is gone.
    """
    info = read_state(state_dir)
    if info is None:
        raise ClusterError("no cluster started here; run `leaguezero cluster start`")
    if not _alive(info.pid):
        raise ClusterError(f"the cluster at {info.address} is gone (pid {info.pid} exited)")
    deadline = time.monotonic() + timeout_s
    while True:
        result = subprocess.run(
            [*_ray_cli(), "status", "--address", info.address],
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
        text = (result.stdout + result.stderr).strip()
        # Right after `start` the head answers before its status is published: wait for it.
        if "No cluster status" not in text or time.monotonic() > deadline:
            return info, text
        time.sleep(1.0)


def stop(state_dir: Path, timeout_s: float = 60.0) -> ClusterInfo | None:
    """Stop the cluster this state directory started (SIGTERM, then SIGKILL after the timeout).

    Returns its info, or None when none was recorded.
    """
    info = read_state(state_dir)
    if info is None:
        return None
    if _alive(info.pid):
        os.kill(info.pid, signal.SIGTERM)  # Ray drains, then stops the node's processes
        deadline = time.monotonic() + timeout_s
        while _alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(info.pid):
            os.killpg(info.pid, signal.SIGKILL)  # its own session: only its processes
    (state_dir / "cluster.json").unlink(missing_ok=True)
    # `ray.init()` without an address would otherwise try the stopped cluster.
    try:
        if RAY_CURRENT_CLUSTER.read_text().strip() == info.address:
            RAY_CURRENT_CLUSTER.unlink()
    except OSError:
        pass
    return info
