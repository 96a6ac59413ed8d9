"""`diplomacy train` killed and resumed keeps the league's data whole (issue 28, item 7).

A run is killed (SIGKILL of the trainer and of the evaluator it spawned, as when the machine
goes away) at exact points — between logging a step's training games and saving the state that
marks the step done, and after the last step with its evaluation just submitted — and resumed
with ``--resume`` to the end. Afterwards the match log holds each step's training games once,
and the same evaluations as a run that was never killed: every ``league.eval_every`` step's,
the last step's included, each once. The kill points come from the test-only hook
``LEAGUEZERO_CRASH_AT`` (:mod:`leaguezero.common.crashpoint`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("diplomacy")

from leaguezero.common.config import read_yaml_file
from leaguezero.common.crashpoint import CRASH_ENV
from leaguezero.common.events import read_events
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.registry import LeagueRegistry
from tests.diplomacy.train.test_train import TINY

STEPS, EVAL_EVERY = 4, 2
SETTINGS = [*TINY, f"train.steps={STEPS}", f"league.eval_every={EVAL_EVERY}"]
DEADLINE = 600.0  # generous: CI shares two cores with other work


def _start(run_dir: Path, *, resume: bool = False, crash_at: str | None = None):
    args = [sys.executable, "-m", "leaguezero", "diplomacy", "train", "--out", str(run_dir)]
    for item in SETTINGS:
        args += ["--set", item]
    if resume:
        args.append("--resume")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(CRASH_ENV, None)
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
    # A session of its own: a kill takes the trainer's whole process group (its evaluator).
    return subprocess.Popen(
        [*args, "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def _run(run_dir: Path, *, resume: bool = False, crash_at: str | None = None) -> None:
    proc = _start(run_dir, resume=resume, crash_at=crash_at)
    try:
        _, err = proc.communicate(timeout=DEADLINE)
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing of the group outlives the run
            os.killpg(proc.pid, signal.SIGKILL)
    if crash_at is None:
        assert proc.returncode == 0, err
    else:
        assert proc.returncode == -signal.SIGKILL, f"not killed at {crash_at}: {err}"


def _saved_step(run_dir: Path) -> int:
    return int(torch.load(run_dir / "state.pt", weights_only=True)["step"])


def _training_counts(run_dir: Path) -> Counter:
    games = MatchLog(run_dir / "league_matches.ndjson").read(kind="training")
    return Counter(r.step for r in games)


def _evaluations(run_dir: Path) -> list[tuple[str, int]]:
    """(challenger, step) of every evaluation that finished, in order."""
    events = read_events(run_dir / "events.ndjson", "league.evaluation_finished")
    return sorted((e["challenger"], int(e["step"])) for e in events)


def _check_complete(run_dir: Path) -> None:
    """What an unkilled run holds: each step's games once, each due evaluation once."""
    assert _saved_step(run_dir) == STEPS
    train = read_yaml_file(run_dir / "config.yaml")["train"]
    per_step = train["groups_per_step"] * train["group_size"]
    assert _training_counts(run_dir) == Counter(dict.fromkeys(range(1, STEPS + 1), per_step))

    # The evaluations of an unkilled run: at every eval_every step, of the newest checkpoint
    # then (one job runs at a time and only a waiting one is ever replaced, so with two due
    # steps both run).
    state = LeagueRegistry(run_dir / "league.json").load()
    due = range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
    expected = sorted(
        (max((a for a in state.checkpoints if a.step <= s), key=lambda a: a.step).name, s)
        for s in due
    )
    assert _evaluations(run_dir) == expected
    games = MatchLog(run_dir / "league_matches.ndjson").read(kind="evaluation")
    keys = Counter(
        (r.step, r.meta["gatekeeper"], r.meta["seed"], r.meta["hero_power"]) for r in games
    )
    assert {k[0] for k in keys} == set(due)
    assert max(keys.values()) == 1, "an evaluation's games were logged twice"
    assert LeagueRegistry(run_dir / "league.json").load().agents[expected[-1][0]].matches > 0


def test_kills_between_record_and_save_and_after_the_last_step_lose_and_duplicate_nothing(
    tmp_path,
) -> None:
    run = tmp_path / "run"
    started = time.monotonic()
    # Killed with step 3's games in the match log but state.pt still at step 2.
    _run(run, crash_at="diplomacy.recorded:3")
    assert _saved_step(run) == 2 and _training_counts(run)[3] > 0
    # Killed after the last step, its evaluation submitted and not finished.
    _run(run, resume=True, crash_at=f"diplomacy.step_done:{STEPS}")
    assert _saved_step(run) == STEPS
    # Resumed with no step left: the pending evaluation still runs.
    _run(run, resume=True)
    _check_complete(run)
    print(f"killed twice and resumed in {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def unkilled(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("unkilled") / "run"
    _run(run)
    _check_complete(run)
    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at",
    ["diplomacy.recorded:2", "diplomacy.step_done:2", "diplomacy.recorded:4", "evaluating:2"],
)
def test_a_run_killed_anywhere_ends_as_an_unkilled_run(tmp_path, unkilled, crash_at) -> None:
    run = tmp_path / "run"
    if crash_at.startswith("evaluating:"):
        # Killed from outside while the step's evaluation job runs.
        step = int(crash_at.split(":")[1])
        proc = _start(run)
        deadline = time.monotonic() + DEADLINE
        while not any(
            int(e["step"]) == step
            for e in read_events(run / "events.ndjson", "league.evaluation_started")
        ):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no evaluation started in time"
            time.sleep(0.1)
        _kill_group(proc)
    else:
        _run(run, crash_at=crash_at)
    _run(run, resume=True)
    _check_complete(run)
    assert _evaluations(run) == _evaluations(unkilled)
    assert _training_counts(run) == _training_counts(unkilled)
