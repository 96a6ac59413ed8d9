"""The payoff table and Nash averaging (issue 52): the table of a small recorded run equals the
hand-counted one; on rock-paper-scissors with a second rock, Nash averaging rates all four 0
where a Bradley-Terry refit ranks paper first (it beats two rocks); ``league matrix`` prints the
table, writes the heatmap and fails in one line on a run without games."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.payoff import maxent_nash, nash_average, payoff_table
from leaguezero.league.rating import fit_ratings
from leaguezero.league.types import MatchResult, Participant


def _match(*seats: tuple[str, float], kind: str = "evaluation") -> MatchResult:
    return MatchResult(
        participants=tuple(Participant(agent, i, score) for i, (agent, score) in enumerate(seats)),
        kind=kind,
    )


def _small_run() -> list[MatchResult]:
    return [
        # A 3-seat game: A beats B twice over (two B seats), ties C; B seats are clones.
        _match(("A", 5.0), ("B", 3.0), ("B", 1.0), ("C", 5.0)),
        # A loses to B once: per game A-vs-B means are 1.0 then 0.0.
        _match(("A", 0.0), ("B", 2.0)),
        _match(("B", 4.0), ("C", 1.0), kind="training"),
    ]


def test_the_table_of_a_small_run_equals_the_hand_counted_one() -> None:
    table = payoff_table(_small_run())
    assert table.agents == ["A", "B", "C"]
    i = {name: k for k, name in enumerate(table.agents)}
    # A vs B: game 1 mean 1.0 (two seat pairs, both won), game 2 mean 0.0.
    assert table.mean[i["A"], i["B"]] == pytest.approx(0.5)
    assert table.games[i["A"], i["B"]] == 2
    assert table.mean[i["B"], i["A"]] == pytest.approx(0.5)
    # A vs C: one tie. B vs C: game 1 B lost both seats (3 < 5, 1 < 5), game 3 B won.
    assert table.mean[i["A"], i["C"]] == pytest.approx(0.5) and table.games[i["A"], i["C"]] == 1
    assert table.mean[i["B"], i["C"]] == pytest.approx(0.5) and table.games[i["B"], i["C"]] == 2
    # The 95% interval over games: mean 0.5, per-game values (1, 0): sd 0.707, se 0.5.
    assert table.low[i["A"], i["B"]] == pytest.approx(0.0)
    assert table.high[i["A"], i["B"]] == pytest.approx(1.0)
    assert np.isnan(table.low[i["A"], i["C"]])  # one game: no interval
    cell = table.to_dict()["table"]["A"]["C"]
    assert cell == {"mean": 0.5, "games": 1, "low": None, "high": None}
    json.dumps(table.to_dict(), allow_nan=False)  # strict JSON
    only_eval = payoff_table(_small_run(), kinds=("evaluation",))
    assert only_eval.mean[i["B"], i["C"]] == pytest.approx(0.0)
    assert only_eval.games[i["B"], i["C"]] == 1


def _rps_with_two_rocks() -> list[MatchResult]:
    beats = {("paper", "rock"), ("paper", "rock2"), ("scissors", "paper"), ("rock", "scissors"),
             ("rock2", "scissors")}  # fmt: skip
    games = []
    for winner, loser in sorted(beats):
        for _ in range(20):
            games.append(_match((winner, 1.0), (loser, 0.0)))
    for _ in range(20):
        games.append(_match(("rock", 0.5), ("rock2", 0.5)))
    return games


def test_nash_averaging_is_blind_to_a_copy_where_a_refit_is_not() -> None:
    games = _rps_with_two_rocks()
    ratings = nash_average(payoff_table(games))
    assert all(abs(r["rating"]) < 1e-3 for r in ratings.values()), ratings
    # The equilibrium: paper and scissors a third each, the two rocks share the last third.
    weights = {name: r["nash_weight"] for name, r in ratings.items()}
    assert weights["paper"] == pytest.approx(1 / 3, abs=1e-3)
    assert weights["scissors"] == pytest.approx(1 / 3, abs=1e-3)
    assert weights["rock"] + weights["rock2"] == pytest.approx(1 / 3, abs=1e-3)
    assert weights["rock"] == pytest.approx(weights["rock2"], abs=1e-3)  # maximum entropy
    fit = fit_ratings(games, anchor="scissors", anchor_elo=1000.0).ratings
    assert fit["paper"] > fit["scissors"] + 50 and fit["paper"] > fit["rock"] + 50


def test_a_dominated_agent_rates_below_zero_and_out_of_the_support() -> None:
    payoff = np.array([[0.0, 0.4], [-0.4, 0.0]])
    p = maxent_nash(payoff)
    assert p == pytest.approx([1.0, 0.0], abs=1e-6)
    games = [_match(("strong", 1.0), ("weak", 0.0)) for _ in range(9)]
    games.append(_match(("strong", 0.0), ("weak", 1.0)))
    ratings = nash_average(payoff_table(games))
    assert ratings["strong"]["rating"] == pytest.approx(0.0, abs=1e-6)
    assert ratings["weak"]["rating"] == pytest.approx(-0.4, abs=1e-6)


def test_league_matrix_prints_the_table_and_writes_the_heatmap(tmp_path) -> None:
    MatchLog(tmp_path / "league_matches.ndjson").extend(_rps_with_two_rocks())
    runner = CliRunner()
    result = runner.invoke(app, ["league", "matrix", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["table"]["paper"]["rock"]["mean"] == 1.0
    assert payload["table"]["paper"]["rock"]["games"] == 20
    assert payload["ratings"]["paper"]["elo"] is None  # no league.json here
    assert (tmp_path / "league_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = runner.invoke(app, ["league", "matrix", str(tmp_path)])
    assert text.exit_code == 0 and "nash avg" in text.output
    empty = runner.invoke(app, ["league", "matrix", str(tmp_path / "none")])
    assert empty.exit_code != 0 and "no recorded games" in empty.output
