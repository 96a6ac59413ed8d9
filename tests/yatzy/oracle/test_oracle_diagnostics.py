"""Oracle diagnostics (regret, match rate) and the ``yz oracle`` commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from leaguezero.yatzy.agents.base import GreedyAgent
from leaguezero.yatzy.agents.match import play_match
from leaguezero.yatzy.agents.oracle import OracleAgent
from leaguezero.yatzy.cli.app import app
from leaguezero.yatzy.oracle.diagnostics import (
    RecordedGame,
    diagnose_decisions,
    diagnose_game,
    diagnose_match,
    load_game,
    replay_game,
    save_game,
    summarize,
)
from leaguezero.yatzy.oracle.solver import EXPECTED_START_VALUE, Oracle, OracleError, load_oracle

runner = CliRunner()


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return load_oracle()


@pytest.fixture(scope="session")
def greedy_vs_oracle(oracle: Oracle):
    return play_match(GreedyAgent(), OracleAgent(oracle=oracle), 6, seed=9, record_actions=True)


def test_regret_is_solver_best_minus_solver_chosen(oracle: Oracle, greedy_vs_oracle) -> None:
    result = greedy_vs_oracle
    states = replay_game(int(result.seeds[0]), result.actions[0])
    actions = np.asarray(result.actions[0])
    diag = diagnose_decisions(oracle, states, actions)
    solver = oracle.option_values(states)
    expected = np.nanmax(solver, axis=1) - solver[np.arange(len(states)), actions]
    np.testing.assert_allclose(diag.regret, expected, rtol=0, atol=1e-9)
    oracle_seat = diag.player == 1  # game 0: greedy (A) in seat 0, the oracle in seat 1
    assert diag.matches[oracle_seat].all() and (diag.regret[oracle_seat] < 1e-9).all()
    assert diag.regret[~oracle_seat].sum() > 1.0 and not diag.matches[~oracle_seat].all()


def test_match_summaries_split_by_agent(oracle: Oracle, greedy_vs_oracle) -> None:
    report = diagnose_match(oracle, greedy_vs_oracle)
    assert report["b"]["oracle_match_rate"] == 1.0 and report["b"]["mean_regret_per_game"] < 1e-6
    assert report["a"]["oracle_match_rate"] < 0.9
    assert 20 < report["a"]["mean_regret_per_game"] < 150  # greedy gives away ~75 points
    assert report["a"]["decisions"] + report["b"]["decisions"] == sum(
        len(a) for a in greedy_vs_oracle.actions
    )
    with pytest.raises(ValueError):
        summarize(diagnose_decisions(oracle, np.zeros((0, 16)), np.zeros(0)), games=0)


def test_recorded_game_round_trip_and_errors(tmp_path, oracle: Oracle, greedy_vs_oracle) -> None:
    game = RecordedGame(
        seed=int(greedy_vs_oracle.seeds[0]),
        dice_mode="keyed",
        actions=greedy_vs_oracle.actions[0],
        players=["greedy", "oracle"],
    )
    path = tmp_path / "game.json"
    save_game(path, game)
    assert load_game(path) == game
    _, diag = diagnose_game(oracle, game)
    assert len(diag.regret) == len(game.actions)
    bad = dict(game.to_json(), schema_version=99)
    (tmp_path / "v99.json").write_text(json.dumps(bad))
    with pytest.raises(OracleError, match="schema_version"):
        load_game(tmp_path / "v99.json")
    illegal = RecordedGame(seed=1, dice_mode="keyed", actions=[31])  # keep-all
    with pytest.raises(OracleError, match="illegal"):
        diagnose_game(oracle, illegal)


def test_cli_expected_prints_the_number_first() -> None:
    result = runner.invoke(app, ["oracle", "expected"])
    assert result.exit_code == 0, result.output
    assert abs(float(result.output.splitlines()[0]) - 248.44) <= 0.01


def test_cli_sim_json() -> None:
    result = runner.invoke(app, ["oracle", "sim", "--games", "2000", "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["games"] == 2000 and abs(stats["mean"] - EXPECTED_START_VALUE) < 4 * stats["se"]
    text = runner.invoke(app, ["oracle", "sim", "--games", "300"]).output
    assert "bonus rate" in text and "█" in text


def test_cli_query_contract() -> None:
    lines = [
        {"avail_mask": 32767, "upper_total": 0, "dice": [6, 5, 3, 3, 1], "rerolls_left": 2},
        {"avail_mask": 1, "upper_total": 0, "dice": [4, 4, 4, 4, 4], "rerolls_left": 0},
        {"avail_mask": 32767, "upper_total": 0, "dice": [7, 1, 1, 1, 1], "rerolls_left": 0},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\nnot json\n"
    result = runner.invoke(app, ["oracle", "query"], input=stdin)
    assert result.exit_code == 1  # two malformed lines
    answers = [json.loads(x) for x in result.output.splitlines()]
    assert len(answers) == 4
    # keep the two threes (mask over sorted dice 1 3 3 5 6), as the solver's best option says
    assert answers[0]["action"] == {"kind": "keep", "mask": 0b01100}
    assert answers[0]["value"] == pytest.approx(245.75477399, abs=1e-6)
    assert answers[0]["value"] == max(answers[0]["values"].values())
    assert len(answers[0]["values"]) == 31 + 15
    assert answers[1]["action"] == {"kind": "mark", "cat": 14} and answers[1]["value"] == 50.0
    assert "error" in answers[2] and "error" in answers[3]


def test_cli_regret(tmp_path, greedy_vs_oracle) -> None:
    path = tmp_path / "game.json"
    save_game(
        path, RecordedGame(int(greedy_vs_oracle.seeds[0]), "keyed", greedy_vs_oracle.actions[0])
    )
    result = runner.invoke(app, ["oracle", "regret", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["seats"]["seat 1"]["mean_regret_per_game"] < 1e-6
    assert len(report["decisions"]) == len(greedy_vs_oracle.actions[0])
    text = runner.invoke(app, ["oracle", "regret", str(path)]).output
    assert "match rate" in text
    missing = runner.invoke(app, ["oracle", "regret", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
