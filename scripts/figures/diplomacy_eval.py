"""The one ``leaguezero diplomacy eval`` call the Diplomacy figure scripts measure with.

``diplomacy_table.py`` and ``dumb_bot_curve.py`` both play a hero against six copies of an
opponent in a child process (seats rotated over the seven powers, learned agents greedy, one
torch thread, nothing saved) and read its ``--json`` summary.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_eval(
    hero: str,
    opponent: str,
    games: int,
    seed: int,
    years: int,
    per_game: bool = False,
    extra: tuple[str, ...] = (),
) -> tuple[dict, float]:
    """Run ``leaguezero diplomacy eval --hero HERO --opponents OPPONENT --games G --seed S --set
    max_years=Y --set run.threads=1 --no-save --json`` (``--per-game`` with ``per_game``).

    Returns the command's JSON summary and the child's CPU seconds (user + system, its start
    included); ``extra``: more arguments of the eval command (``--concurrent-games 8``, ``--set
    llm.mode=constrained``). ``OMP_NUM_THREADS`` defaults to 1 in the child. Raises
    ``subprocess.CalledProcessError`` if the command fails.
    """
    cmd = [
        sys.executable, "-m", "leaguezero.cli", "diplomacy", "eval", "--hero", hero,
        "--opponents", opponent, "--games", str(games), "--seed", str(seed),
        "--set", f"max_years={years}", "--set", "run.threads=1", "--no-save", "--json",
    ]  # fmt: skip
    if per_game:
        cmd.append("--per-game")
    cmd.extend(extra)
    before = _cpu_children()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out), _cpu_children() - before
