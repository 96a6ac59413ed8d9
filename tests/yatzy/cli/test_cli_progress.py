"""What `yz run` shows (issue 16, items 6, 8, 9): progress that advances, rates and ETAs, the
expected duration up front, and a summary line without jargon."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from leaguezero.yatzy.cli.progress import (
    RunProgress,
    expected_iteration_seconds,
    summary_text,
)
from leaguezero.yatzy.config import YatzyConfig


def test_a_total_passed_with_every_game_never_resets_the_phase():
    out = io.StringIO()
    progress = RunProgress(3, 100.0, terminal=False, stream=out, sims_per_game=400)
    progress.start_iteration(1, 3)
    progress.report("selfplay", 0, 20)
    for _ in range(20):  # what the loop does: report("selfplay", 1, games) per finished game
        progress.report("selfplay", 1, 20)
    assert progress.phases["selfplay"].done == 20
    done = [int(m) for m in re.findall(r"self-play (\d+)/20 games", out.getvalue())]
    assert done == sorted(done) and done[-1] == 20 and len(done) == 10  # one line per tenth
    assert "sims/s" in out.getvalue() and "ETA" in out.getvalue()


@pytest.mark.parametrize(
    "kind, low, high",
    # turn (the default): 60 iterations of 500 steps took 17 min (17 s each) beside two other
    # heavy jobs (the estimate is pessimistic there: ~25 s idle);
    # puct with the previous defaults: ~69 s idle, 3-4.5 min on a busy machine.
    [("turn", 20, 45), ("puct", 60, 120)],
)
def test_expected_duration_depends_on_the_work_per_iteration(kind, low, high):
    overrides = {"search": {"kind": kind}}
    if kind == "puct":  # the PUCT calibration run's settings
        overrides |= {"selfplay": {"games_per_iteration": 768, "concurrent_games": 128},
                      "train": {"steps": 600}, "gate": {"max_games": 800}}  # fmt: skip
    cfg = YatzyConfig.model_validate(overrides)
    idle, busy = expected_iteration_seconds(cfg)
    assert low <= idle <= high and busy == 3 * idle
    more = cfg.model_copy(update={"selfplay": cfg.selfplay.model_copy(
        update={"games_per_iteration": 2 * cfg.selfplay.games_per_iteration})})  # fmt: skip
    assert expected_iteration_seconds(more)[0] > idle


def test_summary_line_speaks_plainly_and_counts_resumed_games():
    record = {
        "iteration": 4,
        "selfplay": {"games": 601, "sims_per_s": 41000.0},
        "train": {"first_loss_total": 3.1, "loss_total": 2.8},
        "gate": {"a_win_rate": 0.56, "games": 400},
        "eval": {
            "candidate": {"mean": 181.2},
            "vs_greedy": {"a_win_rate": 0.4},
            "vs_oracle": {"a_win_rate": 0.05},
        },
        "promoted": True,
        "promotion_reason": "sprt_h1",
    }
    line = summary_text(record, last=10, seconds=150, games=768, resumed=True)
    assert "iteration 4/10 took 2m30s since resume" in line
    assert "self-play 768 games" in line  # all of the iteration's games, not the 601 after resume
    assert "new best model (significantly better)" in line
    for jargon in ("sprt", "regret/g", "loss p", "h1"):
        assert jargon not in line


def test_yz_run_progress_advances_when_output_is_not_a_terminal(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "leaguezero", "yatzy", "run", "--config",
           "configs/yatzy_smoke.yaml", "--out", str(tmp_path / "run"), "--set",
           "run.iterations=1", "--set", "gate.min_games=20", "--set", "gate.max_games=20",
           "--set", "oracle_eval.games=0", "--set", "oracle_eval.match_games=0"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert re.search(r"expected: \S+-\S+ per iteration", done.stdout)
    played = [int(m) for m in re.findall(r"self-play (\d+)/48 games", done.stderr)]
    assert len(played) >= 5 and played == sorted(played) and played[-1] == 48, done.stderr
    assert re.search(
        r"self-play \d+/48 games \(\d+%\), [\d.,]+ games/s, ~[\d,]+ sims/s", done.stderr
    )
    assert "ETA" in done.stderr and "run ETA" in done.stderr
    (summary,) = [line for line in done.stdout.splitlines() if line.startswith("iteration 1/1")]
    assert "self-play 48 games at" in summary and "sprt" not in summary
