"""The command line as a user runs it (a real subprocess for the entry points)."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from leaguezero.cli import app

runner = CliRunner()


def test_rules_score_json():
    result = runner.invoke(
        app, ["yatzy", "rules", "score", "--dice", "3", "3", "3", "5", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["scores"]["house"] == 19 and data["scores"]["two_pairs"] == 16
    assert next(iter(data["scores"])) == "ones" and len(data["scores"]) == 15


def test_rules_legal_and_bad_dice():
    result = runner.invoke(
        app, ["yatzy", "rules", "legal", "--dice", "1", "2", "3", "4", "6", "--rerolls-left", "0",
              "--avail-mask", "3", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["legal"] == [45, 46]
    bad = runner.invoke(app, ["yatzy", "rules", "score", "--dice", "1", "2", "3", "4", "9"])
    assert bad.exit_code == 2 and "1..6" in bad.output


def test_match_json_contract():
    result = runner.invoke(
        app, ["yatzy", "match", "--a", "greedy", "--b", "greedy", "--games", "20", "--seed", "1",
              "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in ("a_win_rate", "a_wins", "draws", "a_score_mean", "b_score_mean",
                "score_diff_mean", "score_diff_se"):  # fmt: skip
        assert key in data
    assert data["a_win_rate"] == 0.5


def test_config_error_is_one_line():
    result = runner.invoke(app, ["yatzy", "config", "show", "--set", "mcts.c_puct=-1"])
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == "config error: mcts.c_puct: Input should be greater than 0 (got -1)"
    )


def test_entry_points_run_as_processes():
    out = subprocess.run(
        [sys.executable, "-m", "leaguezero", "yatzy", "rules", "score", "--dice", "1", "2", "3",
         "4", "5", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["scores"]["small_straight"] == 15
