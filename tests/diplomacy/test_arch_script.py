"""scripts/figures/diplomacy_arch.py: shapes parsed, every shape trained on one corpus (a tiny
one here), and a rerun trains only the shapes not yet in its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("diplomacy")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "figures" / "diplomacy_arch.py"


def test_shapes_parse_and_bad_ones_are_refused() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("diplomacy_arch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.parse_shape("128x2") == (128, 2, 0)
    assert module.parse_shape(" 64x3a4") == (64, 3, 4)
    for bad in ("64", "64x", "x2", "64x2b4", "64x2a"):
        with pytest.raises(ValueError, match="HxL"):
            module.parse_shape(bad)


def test_shapes_train_on_one_corpus_and_a_rerun_resumes(tmp_path) -> None:
    from leaguezero.diplomacy.agents.policy import load_policy

    def run(shapes: str) -> str:
        cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--games", "2"]
        cmd += ["--val-games", "1", "--years", "1", "--epochs", "1", "--shapes", shapes]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
        return done.stdout

    run("8x1,8x1a2")
    rows = [json.loads(line) for line in (tmp_path / "arch.jsonl").open()]
    assert [r["shape"] for r in rows] == ["8x1", "8x1a2"]
    assert rows[0]["choices"] == rows[1]["choices"] > 0  # one corpus for both
    assert rows[0]["val_choices"] == rows[1]["val_choices"] > 0
    assert rows[1]["parameters"] > rows[0]["parameters"]
    assert load_policy(tmp_path / "8x1a2.pt").config.attention == 2
    assert "--attention 2" in rows[1]["command"]

    first = (tmp_path / "8x1.pt").stat().st_mtime_ns
    run("8x1,8x2")  # 8x1 is in the table: only 8x2 is trained
    rows = [json.loads(line) for line in (tmp_path / "arch.jsonl").open()]
    assert [r["shape"] for r in rows] == ["8x1", "8x1a2", "8x2"]
    assert (tmp_path / "8x1.pt").stat().st_mtime_ns == first
    again = run("8x1,8x2")  # nothing to train: the paired held-out losses only
    assert again.startswith("every shape") and "8x2: " in again and "difference" in again
