"""gate.mode continuous: every candidate promoted, a periodic regression check rolls back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.train.evaluation.gate import check_seeds, run_check
from tests.in_process import yz_here

ROOT = Path(__file__).resolve().parents[4]
SMOKE = ROOT / "configs" / "yatzy_smoke.yaml"


def test_the_check_rolls_back_a_network_that_scores_fewer_points() -> None:
    seeds = check_seeds("dev-v1", 10, 40)
    worse = run_check(RandomAgent(seed=1), GreedyAgent(), seeds)
    assert not worse.promote and worse.reason == "rollback"
    assert worse.summary.score_diff_mean < -2 * worse.summary.score_diff_se
    better = run_check(GreedyAgent(), RandomAgent(seed=1), seeds)
    assert better.promote and better.reason == "check_passed"
    assert better.to_dict()["sprt"] is None and better.to_dict()["games"] == 80


def test_check_seeds_are_fresh_per_iteration_and_reproducible() -> None:
    a, b = check_seeds("dev-v1", 10, 50), check_seeds("dev-v1", 20, 50)
    assert not np.intersect1d(a, b).size
    np.testing.assert_array_equal(a, check_seeds("dev-v1", 10, 50))


def test_a_continuous_run_promotes_every_candidate_and_checks_on_schedule(tmp_path) -> None:
    out = tmp_path / "run"
    result = yz_here(
        "run", "--config", str(SMOKE), "--out", str(out), "--set", "search.kind=turn",
        "--set", "gate.mode=continuous", "--set", "gate.check_every=2",
        "--set", "gate.check_games=40",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first = json.loads((out / "gate" / "iter_0001.json").read_text())
    assert first == {"promote": True, "reason": "continuous"}
    assert "promoted without a gate" in result.stdout
    second = json.loads((out / "gate" / "iter_0002.json").read_text())
    assert second["reason"] in {"check_passed", "rollback"} and second["games"] == 40
    assert "regression check:" in result.stdout
    # After a check the best is the anchor: the candidate that passed, or the one rolled back to.
    models = out / "models"
    assert (models / "best.pt").read_bytes() == (models / "anchor.pt").read_bytes()
    if second["reason"] == "rollback":
        assert (models / "best.pt").read_bytes() == (models / "best_0000.pt").read_bytes()
    else:
        assert (models / "best.pt").read_bytes() == (models / "candidate_0002.pt").read_bytes()
