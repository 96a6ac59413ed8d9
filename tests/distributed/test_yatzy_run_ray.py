"""`yz run --backend ray` joins the session's Ray cluster and leaves the same kind of run
directory as the local backend: shards, candidate, gate and eval files, logs, state."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leaguezero.az.replay import complete_shards, games_on_disk
from leaguezero.common.events import read_events

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "yatzy_smoke.yaml"
# The smoke config with one iteration and smaller gate/eval sets: this checks plumbing.
SMALL = ["run.iterations=1", "gate.max_games=20", "gate.min_games=20",
         "oracle_eval.games=4", "oracle_eval.match_games=4"]  # fmt: skip


def _yz_run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    sets = [arg for s in SMALL for arg in ("--set", s)]
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "run", "--config", str(SMOKE),
           "--out", str(out), *sets, *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


# Written only when the gate promotes the candidate, which depends on the games played.
PROMOTION_ONLY = {"models/best.pt.meta.json"}


def _kinds(run: Path) -> set[str]:
    """Files of a run with worker ids and numbers blanked: what kind of artifact each is."""
    kinds = {re.sub(r"\d+", "N", str(p.relative_to(run))) for p in run.rglob("*") if p.is_file()}
    return kinds - PROMOTION_ONLY


def test_ray_backend_iteration_matches_the_local_artifacts(ray_cluster, tmp_path):
    address = ray_cluster.get_runtime_context().gcs_address
    ray_out, local_out = tmp_path / "ray", tmp_path / "local"
    # The local run first: its one process compiles the search once into numba's cache beside
    # the sources, which the Ray actors then load (each would compile it again on a fresh
    # checkout: tens of CPU-seconds apiece).
    local_run = _yz_run(local_out)
    assert local_run.returncode == 0, local_run.stderr[-3000:]
    ray_run = _yz_run(ray_out, "--backend", "ray", "--set", f"run.ray_address={address}",
                      "--set", "selfplay.workers=2")  # fmt: skip
    assert ray_run.returncode == 0, ray_run.stderr[-3000:]

    assert _kinds(ray_out) == _kinds(local_out)
    for out in (ray_out, local_out):
        first = out / "replay" / "iter_0001"
        assert complete_shards(first) and games_on_disk(first) == 48
        assert (out / "models" / "candidate_0001.pt").is_file()
        assert json.loads((out / "run_state.json").read_text())["iteration"] == 1
    # Two actors with their own worker ids wrote the Ray run's shards.
    assert games_on_disk(ray_out / "replay" / "iter_0001", worker=1) == 24
    ray_stats, local_stats = (read_events(o / "logs" / "iteration_stats.ndjson")
                              for o in (ray_out, local_out))  # fmt: skip
    assert len(ray_stats) == len(local_stats) == 1
    assert set(ray_stats[0]) == set(local_stats[0])
    assert set(ray_stats[0]["detail"]) == set(local_stats[0]["detail"])
    assert ray_stats[0]["selfplay_games"] == 48 and ray_stats[0]["loss_total"] > 0
    resolved = (ray_out / "config.yaml").read_text()
    assert "backend: ray" in resolved and address in resolved


def test_unknown_backend_is_a_one_line_config_error(tmp_path):
    result = _yz_run(tmp_path / "x", "--backend", "spark")
    assert result.returncode == 2 and "run.backend" in result.stderr
    assert "Traceback" not in result.stderr
