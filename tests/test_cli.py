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


def test_too_few_dice_show_the_expected_syntax():
    for args in (["1", "2", "3"], ["1", "2", "x", "4", "5"]):
        bad = runner.invoke(app, ["yatzy", "rules", "score", "--dice", *args])
        assert bad.exit_code == 2 and "--dice 3 3 3 5 5" in bad.output, bad.output


def test_first_oracle_build_says_so_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    import shutil

    import yatzy_solver

    from leaguezero.yatzy.oracle.solver import default_table_path, ensure_table

    cached = ensure_table()  # the real table (built once per machine)
    assert cached == default_table_path()

    def fake_build(variant, path, precision=None):  # a copy instead of a 20-s build
        shutil.copyfile(cached, path)

    monkeypatch.setattr(yatzy_solver.Solver, "build_table", staticmethod(fake_build))
    table = tmp_path / "table.bin"
    result = runner.invoke(app, ["yatzy", "oracle", "expected", "--oracle-table", str(table)])
    assert result.exit_code == 0, result.output
    assert "building the oracle table once" in result.stderr
    assert result.stdout.splitlines()[0].startswith("248.4")  # the contract: number first


def test_oracle_eval_takes_pretrained_and_prints_boards_and_se():
    result = runner.invoke(
        app, ["yatzy", "oracle-eval", "--best", "pretrained", "--set", "oracle_eval.games=4"]
    )
    assert result.exit_code == 0, result.output
    assert "boards" in result.output and " ± " in result.output
    bad = runner.invoke(app, ["yatzy", "oracle-eval", "--best", "pretrained?depth=7"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def test_match_with_every_pair_won_says_too_few_games():
    result = runner.invoke(
        app, ["yatzy", "match", "--a", "greedy", "--b", "random", "--games", "4", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "too few games" in result.output and "± 0.0000" not in result.output
