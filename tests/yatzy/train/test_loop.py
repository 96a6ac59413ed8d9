"""The main job end to end: `yz run` on the smoke config, and resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leaguezero.az.replay import complete_shards, games_on_disk
from leaguezero.common.events import read_events
from tests.in_process import here, yz_here

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "configs" / "yatzy_smoke.yaml"


def _yz(*args: str, **kw) -> subprocess.CompletedProcess:
    """``yz ARGS`` as its own process (the tests about kills, signals and workers)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", "yatzy", *args],
        capture_output=True, text=True, env=env, timeout=600, **kw,
    )  # fmt: skip


def test_smoke_run_produces_every_artifact(tmp_path):
    out = tmp_path / "smoke"
    result = yz_here("run", "--config", str(SMOKE), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "iteration 2/2 took" in result.stdout
    assert (out / "config.yaml").exists()
    for it in (1, 2):
        shards = complete_shards(out / "replay" / f"iter_{it:04d}")
        assert shards and games_on_disk(out / "replay" / f"iter_{it:04d}") == 48
        assert (out / "models" / f"candidate_{it:04d}.pt").exists()
        decision = json.loads((out / "gate" / f"iter_{it:04d}.json").read_text())
        assert decision["reason"] in {"sprt_h1", "sprt_h0", "threshold"}
        assert decision["games"] >= 2 and "score_diff_se" in decision
    stats = read_events(out / "logs" / "iteration_stats.ndjson")
    assert [e["iteration"] for e in stats] == [1, 2]
    assert stats[0]["loss_total"] > 0 and stats[0]["sims_per_s"] > 0
    assert stats[0]["solitaire_mean"] > 0 and 0 <= stats[0]["oracle_match_rate"] <= 1
    roots = read_events(out / "logs" / "mcts_roots.ndjson")
    assert roots and {"raw_priors", "noisy_priors", "visits", "pi_entropy", "oracle_regret"} <= set(
        roots[0]
    )
    # Running it again without --resume refuses to overwrite.
    again = yz_here("run", "--config", str(SMOKE), "--out", str(out))
    assert again.returncode == 2 and "--resume" in again.stderr


def test_run_killed_during_selfplay_resumes_and_completes(tmp_path):
    out = tmp_path / "killed"
    args = ["--set", "selfplay.concurrent_games=6", "--set", "selfplay.shard_samples=200"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "run", "--config", str(SMOKE),
         "--out", str(out), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    first = out / "replay" / "iter_0001"
    deadline = time.time() + 300
    while time.time() < deadline and len(complete_shards(first)) < 2:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_at_kill = games_on_disk(first)
    assert 0 < done_at_kill < 48, "the kill should land in the middle of self-play"
    result = yz_here("run", "--out", str(out), "--resume")
    assert result.returncode == 0, result.stderr
    assert games_on_disk(first) == 48  # the missing games were played, none twice
    stats = read_events(out / "logs" / "iteration_stats.ndjson")
    assert [e["iteration"] for e in stats] == [1, 2]
    finished = yz_here("run", "--out", str(out), "--resume")
    assert finished.returncode == 0 and "all 2 iterations are done" in finished.stdout


def test_resume_over_replay_of_an_older_format_fails_with_a_clear_message(tmp_path):
    out = tmp_path / "old"
    first = yz_here("run", "--config", str(SMOKE), "--out", str(out), "--set", "run.iterations=1")
    assert first.returncode == 0, first.stderr
    for meta in (out / "replay" / "iter_0001").glob("*.meta.json"):  # as an old version wrote
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "shard_format_version": 1}))
    result = yz_here("run", "--out", str(out), "--resume", "--set", "run.iterations=2")
    assert result.returncode == 2
    assert "has format version 1; this build reads 2" in result.stderr
    assert "Traceback" not in result.stderr


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie: a container's pid 1 may never reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


def _children(pid: int) -> list[int]:
    """Live child process ids of ``pid`` (Linux /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_stops_run_and_its_workers_cleanly(tmp_path):
    out = tmp_path / "term"
    args = ["--set", "selfplay.workers=2", "--set", "selfplay.concurrent_games=6",
            "--set", "selfplay.shard_samples=200"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "run", "--config", str(SMOKE),
         "--out", str(out), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    first = out / "replay" / "iter_0001"
    deadline = time.time() + 300
    while time.time() < deadline and not complete_shards(first):
        time.sleep(0.1)
    workers = _children(proc.pid)
    assert len(workers) >= 2, "two self-play workers should be running"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    deadline = time.monotonic() + 60  # a loaded machine may take a while to reap them
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = {w: _cmdline(w) for w in workers if _alive(w)}
    assert not alive, f"workers {alive} outlived the run"
    assert games_on_disk(first) < 48, "the workers should stop mid-self-play, not finish first"
    result = yz_here("run", "--out", str(out), "--resume")
    assert result.returncode == 0, result.stderr
    assert games_on_disk(first) == 48


@pytest.mark.slow
def test_default_config_iteration(tmp_path):
    """One iteration of the default local config (minutes): the real job, not the smoke."""
    out = tmp_path / "local"
    result = _yz("run", "--config", str(ROOT / "configs" / "yatzy_local_cpu.yaml"), "--out",
                 str(out), "--set", "run.iterations=1")  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_report_of_a_run(tmp_path):
    out = tmp_path / "run"
    result = yz_here("run", "--config", str(SMOKE), "--out", str(out), "--set", "run.iterations=1")
    assert result.returncode == 0, result.stderr
    rep = here("report", str(out))
    assert rep.returncode == 0, rep.stderr
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 5 and "<table>" in page
    missing = here("report", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "not a yz run directory" in missing.stderr


def test_turn_search_run_trains_turn_networks_end_to_end(tmp_path):
    out = tmp_path / "turn"
    result = yz_here("run", "--config", str(SMOKE), "--out", str(out), "--set", "search.kind=turn")
    assert result.returncode == 0, result.stderr
    for it in (1, 2):
        folder = out / "replay" / f"iter_{it:04d}"
        assert games_on_disk(folder) == 48
        meta = json.loads(complete_shards(folder)[0].with_suffix(".meta.json").read_text())
        assert meta["feature_schema_id"] == 2 and meta["num_features"] == 169
        ckpt = json.loads((out / "models" / f"candidate_{it:04d}.pt.meta.json").read_text())
        assert ckpt["feature_schema_id"] == 2
        ev = json.loads((out / "eval" / f"iter_{it:04d}.json").read_text())
        assert ev["candidate"]["boards"] == 40 and ev["candidate"]["mean"] > 0
    stats = read_events(out / "logs" / "iteration_stats.ndjson")
    assert stats[-1]["sims_per_s"] > 0 and stats[-1]["loss_value"] > 0
    match = yz_here("match", "--a", f"model:{out / 'models' / 'best.pt'}", "--b", "greedy",
                    "--games", "4", "--json")  # fmt: skip
    assert match.returncode == 0, match.stderr
    assert json.loads(match.stdout)["games"] == 4
    wrong = yz_here("match", "--a", f"model:{out / 'models' / 'best.pt'}?search=puct", "--b",
                    "greedy", "--games", "2")  # fmt: skip
    assert wrong.returncode == 2 and "turn-search network" in wrong.stderr
