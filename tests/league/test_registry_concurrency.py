"""Many real processes doing read-modify-write on one league.json, some killed with SIGKILL."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

from leaguezero.league.registry import LeagueRegistry, RegistryError

WORKERS = 8
UPDATES = 200


def _writer(path: str, worker: int, updates: int, ack_path: str | None) -> None:
    registry = LeagueRegistry(path)
    for _ in range(updates):
        with registry.update() as state:
            counts = state.metadata.setdefault("counts", {})
            counts[str(worker)] = counts.get(str(worker), 0) + 1
            state.metadata["total"] = state.metadata.get("total", 0) + 1
        if ack_path is not None:
            # Acknowledge after the commit: a kill between commit and ack leaves count = ack + 1.
            with open(ack_path, "a") as f:
                f.write("x")


def _reader(path: str, stop_path: str, out_path: str) -> None:
    registry = LeagueRegistry(path)
    reads = errors = 0
    while not os.path.exists(stop_path):
        try:
            registry.load()
            reads += 1
        except RegistryError:
            errors += 1
        time.sleep(0.001)  # leave the two cores to the writers
    Path(out_path).write_text(json.dumps({"reads": reads, "errors": errors}))


def test_parallel_updates_lose_nothing_and_survive_sigkill(tmp_path):
    path = str(tmp_path / "league.json")
    LeagueRegistry.create(path, run_name="concurrency", baselines={"random": 800.0})
    ctx = mp.get_context("fork")
    stop = str(tmp_path / "stop")
    reader = ctx.Process(target=_reader, args=(path, stop, str(tmp_path / "reader.json")))
    reader.start()
    writers = [ctx.Process(target=_writer, args=(path, w, UPDATES, None)) for w in range(WORKERS)]
    # Victims: endless writers that are SIGKILLed at random moments, mid-update or mid-write.
    victim_ids = [100 + i for i in range(3)]
    acks = {v: str(tmp_path / f"ack{v}") for v in victim_ids}
    victims = {v: ctx.Process(target=_writer, args=(path, v, 10**9, acks[v])) for v in victim_ids}
    started = time.monotonic()
    for p in [*writers, *victims.values()]:
        p.start()
    rng = random.Random(7)
    for i, (v, proc) in enumerate(victims.items()):
        # Killed once it has committed a few updates (a condition, not a sleep: under load a
        # fixed delay can pass before a victim wrote anything), at a moment of its loop the
        # scheduler picks: mid-update, mid-write or between updates.
        deadline = time.monotonic() + 300
        while not Path(acks[v]).exists() or len(Path(acks[v]).read_text()) < 1 + 2 * i:
            assert time.monotonic() < deadline, f"victim {v} wrote nothing in 300 s"
            time.sleep(0.005)
        time.sleep(rng.random() * 0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL, f"victim {v} was not killed"
    for p in writers:
        p.join(120)
        assert p.exitcode == 0
    Path(stop).touch()
    reader.join(30)
    elapsed = time.monotonic() - started

    state = LeagueRegistry(path).load()  # readable after all of it
    counts = state.metadata["counts"]
    for w in range(WORKERS):
        assert counts[str(w)] == UPDATES, f"worker {w} lost updates"
    victim_total = 0
    for v in victim_ids:
        acked = len(Path(acks[v]).read_text()) if Path(acks[v]).exists() else 0
        got = counts.get(str(v), 0)
        assert acked <= got <= acked + 1, f"victim {v}: {acked} acknowledged, {got} stored"
        victim_total += got
    assert victim_total > 0, "the victims never wrote; the kill test tested nothing"
    assert state.metadata["total"] == WORKERS * UPDATES + victim_total
    report = json.loads((tmp_path / "reader.json").read_text())
    assert report["errors"] == 0 and report["reads"] > 0
    assert elapsed < 60, f"took {elapsed:.1f} s"


def _killed_before_replace(path: str) -> None:
    """One update whose writer is SIGKILLed after writing its temp file, before the rename."""
    import leaguezero.common.atomic as atomic

    def die(*_args) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    atomic.os.replace = die  # this child's os module only: it dies at the rename
    with LeagueRegistry(path).update() as state:
        state.metadata["total"] = -1


def test_a_killed_writers_temp_file_is_removed_by_the_next_writer(tmp_path):
    """Issue 41 item 7: a SIGKILLed writer's ``.league.json.*.tmp`` does not stay forever."""
    path = tmp_path / "league.json"
    LeagueRegistry.create(path, run_name="t", baselines={"random": 800.0})
    before = path.read_bytes()
    ctx = mp.get_context("spawn")
    for _ in range(3):  # each killed writer first removes the one before it
        proc = ctx.Process(target=_killed_before_replace, args=(str(path),))
        proc.start()
        proc.join(timeout=120)
        assert proc.exitcode == -signal.SIGKILL
        assert len(list(tmp_path.glob(".league.json.*.tmp"))) == 1
        assert path.read_bytes() == before  # the old file, whole
    registry = LeagueRegistry(path)
    assert registry.load().metadata.get("total") is None  # a reader leaves them (no lock)
    with registry.update() as state:  # the next writer, under the lock, removes them
        state.metadata["total"] = 1
    assert not list(tmp_path.glob(".league.json.*.tmp"))
    assert registry.load().metadata["total"] == 1
