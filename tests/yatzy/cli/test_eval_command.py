"""`yz eval RUN`: a run's best measured the way the README reports it (solitaire points and the
win rate against the exact oracle, each with its SE), written where `leaguezero report` reads it,
and the regression check's summary line stating the rule it applied."""

from __future__ import annotations

import html
import json

from typer.testing import CliRunner

from leaguezero.cli import app as leaguezero_app
from leaguezero.common.config import write_resolved_config
from leaguezero.yatzy.cli.app import app
from leaguezero.yatzy.cli.progress import summary_text
from leaguezero.yatzy.config import YatzyConfig

runner = CliRunner()


def _run_dir(tmp_path):
    """A run directory as `yz run` leaves it: its resolved config and a best network."""
    run = tmp_path / "run"
    write_resolved_config(YatzyConfig(), run)
    result = runner.invoke(app, ["init-model", "--out", str(run / "models" / "best.pt")])
    assert result.exit_code == 0, result.output
    return run


def test_eval_reports_solitaire_and_oracle_with_standard_errors(tmp_path):
    run = _run_dir(tmp_path)
    args = ["eval", str(run), "--boards", "12", "--games", "12", "--seed", "5"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    alone, match = report["solitaire"], report["vs_oracle"]
    assert alone["boards"] == 12 and alone["se"] > 0
    assert report["oracle_solitaire"]["boards"] == 12
    # A random network is far from the oracle on the same boards.
    assert alone["mean"] < report["oracle_solitaire"]["mean"] - 50
    assert match["games"] == 12 and match["seed"] == 6 and 0 <= match["a_win_rate"] < 0.5
    assert json.loads((run / "eval" / "best_eval.json").read_text()) == report
    # The same seeds give the same figures, and the text says what ± means.
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert f"{alone['mean']:.1f} ± {alone['se']:.1f} points a board over 12 boards" in text.stdout
    if match["a_win_rate_se"] > 0:
        assert f"win rate {match['a_win_rate']:.4f} ± {match['a_win_rate_se']:.4f}" in text.stdout
    else:  # a random network loses every game: no spread, an interval over the games instead
        assert f"win rate {match['a_win_rate']:.4f} (every game alike)" in text.stdout
    assert "95% interval" in text.stdout and "one standard error" in text.stdout


def test_report_shows_the_same_numbers_as_yz_eval(tmp_path):
    run = _run_dir(tmp_path)
    (run / "logs").mkdir()
    (run / "logs" / "iteration_stats.ndjson").write_text(
        json.dumps({"event": "iteration", "iteration": 1, "promoted": True}) + "\n"
    )
    result = runner.invoke(leaguezero_app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert f"Not measured yet: <code>yz eval {run}</code>" in (run / "report.html").read_text()
    measured = runner.invoke(app, ["eval", str(run), "--boards", "8", "--games", "8"])
    assert measured.exit_code == 0, measured.output
    result = runner.invoke(leaguezero_app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    assert "The run's best, measured (yz eval)" in page
    for line in measured.stdout.strip().splitlines():
        assert html.escape(line) in page


def test_eval_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code != 0
    assert "not a run directory" in result.output and "Traceback" not in result.output
    write_resolved_config(YatzyConfig(), tmp_path)
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code != 0 and "has not finished an iteration" in result.output


def _check_record(mean: float, se: float, reason: str) -> dict:
    return {
        "iteration": 10,
        "promoted": reason == "check_passed",
        "promotion_reason": reason,
        "gate": {"score_diff_mean": mean, "score_diff_se": se, "games": 2000},
    }


def test_the_regression_check_line_states_its_rule():
    passed = summary_text(_check_record(-0.07, 0.79, "check_passed"), last=60, seconds=9.0,
                          games=1024, resumed=False)  # fmt: skip
    assert "-0.07 is within the allowed drop of -2 SE = -1.58" in passed
    rolled = summary_text(_check_record(-2.0, 0.5, "rollback"), last=60, seconds=9.0,
                          games=1024, resumed=False)  # fmt: skip
    assert "-2.00 is below the allowed drop of -2 SE = -1.00" in rolled


def test_the_iteration_line_gives_its_win_rates_with_their_se():
    record = _check_record(0.5, 0.4, "check_passed")
    record["eval"] = {
        "vs_greedy": {"a_win_rate": 0.85, "a_win_rate_se": 0.035, "games": 100},
        "vs_oracle": {"a_win_rate": 0.42, "a_win_rate_se": 0.049, "games": 100},
    }
    line = summary_text(record, last=60, seconds=9.0, games=1024, resumed=False)
    assert "beats the greedy bot 85% ± 4%, the perfect player 42% ± 5% of 100 games" in line
    record["eval"]["vs_oracle"] = {"a_win_rate": 0.0, "a_win_rate_se": 0.0, "games": 20}
    line = summary_text(record, last=60, seconds=9.0, games=1024, resumed=False)
    assert "the perfect player 0% ± ? of" in line  # no spread is not a certain 0


def test_a_win_rate_without_spread_is_not_printed_as_certain():
    from leaguezero.yatzy.train.best_eval import eval_lines

    board = {"mean": 60.6, "se": 1.3, "boards": 200, "oracle_match_rate": 0.145}
    match = {"a_win_rate": 0.0, "a_win_rate_se": 0.0, "games": 200, "seed": 2,
             "score_diff_mean": -183.4, "score_diff_se": 2.95}  # fmt: skip
    result = {"seed": 1, "solitaire": board, "oracle_solitaire": {**board, "mean": 249.2},
              "vs_oracle": match}  # fmt: skip
    text = "\n".join(eval_lines(result))
    assert "0.0000 (every game alike)" in text and "± 0.0000" not in text
    assert "95% interval 0.000-0.019" in text  # Wilson's over the 200 games
