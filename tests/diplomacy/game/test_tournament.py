"""Tournaments: rotated cluster seating, Elo from each game, match log, the eval CLI."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("diplomacy")

from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentKind, seat_spec
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.tournament import run_tournament, seat_powers
from leaguezero.league.matchlog import read_matches


def _seat_names(hero, opponents, game_idx, max_unique, rng) -> dict[str, str]:
    seating = seat_powers(
        seat_spec(hero), [seat_spec(o) for o in opponents], game_idx, max_unique, rng
    )
    return {power: spec.name for power, spec in seating.items()}


def test_seating_rotates_hero_and_clusters() -> None:
    rng = random.Random(0)
    for game_idx in range(7):
        seating = _seat_names("hero", ["A", "B"], game_idx, 2, rng)
        order = [seating[POWERS[(game_idx + k) % 7]] for k in range(7)]
        assert order == ["hero", "A", "A", "A", "B", "B", "B"]
    six = _seat_names("hero", ["A", "B", "C", "D", "E", "F"], 3, 6, rng)
    assert six["GERMANY"] == "hero" and sorted(six.values()) == [*sorted("ABCDEF"), "hero"]
    assert _seat_names("hero", ["A", "B", "C"], 0, 1, rng) == {
        power: ("hero" if power == "AUSTRIA" else "A") for power in POWERS
    }
    with pytest.raises(ValueError, match="at least one opponent"):
        _seat_names("hero", [], 0, 6, rng)


def test_seating_seats_the_specs_it_is_given() -> None:
    # Each seat is the very spec the caller parsed (nothing downstream parses a name again).
    base, bot = seat_spec(None), seat_spec("random_bot")
    seating = seat_powers(base, [bot], 0, 6, random.Random(0))
    assert seating["AUSTRIA"] is base and base.kind is AgentKind.BASE_MODEL
    assert all(seating[p] is bot for p in POWERS[1:])


def test_tournament_ratings_matchlog_and_report(tmp_path) -> None:
    cfg = DiplomacyConfig(run={"seed": 4}, max_years=2, games_dir=str(tmp_path / "games"))
    log_path = tmp_path / "matches.ndjson"
    result = run_tournament(
        cfg,
        seat_spec("greedy_bot"),
        [seat_spec("random_bot"), seat_spec("chaos_bot")],
        games=3,
        matchlog=log_path,
        ratings={"random_bot": 800.0},
    )
    report = result.report()
    assert [g["hero_power"] for g in report["per_game"]] == ["AUSTRIA", "ENGLAND", "FRANCE"]
    hero = report["hero"]
    assert hero["seats"] == 3 and 0 <= hero["win_rate"] <= 1
    assert report["opponents"]["random_bot"]["seats"] == 9
    assert report["opponents"]["random_bot"]["rating_before"] == 800.0
    assert hero["rating_before"] == 1000.0
    total_change = hero["rating_change"] + sum(
        o["rating_change"] for o in report["opponents"].values()
    )
    assert total_change == pytest.approx(0.0, abs=1e-9)  # the update is zero-sum
    wins = hero["wins"] + sum(o["wins"] for o in report["opponents"].values())
    assert wins == pytest.approx(3.0)  # one win per game, shared on ties
    matches = read_matches(log_path)
    assert len(matches) == 3 and all(len(m.participants) == 7 for m in matches)
    assert matches[0].game == "diplomacy" and matches[0].meta["hero_power"] == "AUSTRIA"
    assert {p.seat for p in matches[1].participants} == set(POWERS)
    assert len(list((tmp_path / "games").glob("*.json"))) == 3


def test_self_play_moves_no_rating() -> None:
    cfg = DiplomacyConfig(run={"seed": 1}, max_years=2, games_dir=None)
    bot = seat_spec("random_bot")
    report = run_tournament(cfg, bot, [bot], games=2).report()
    assert report["hero"]["rating_change"] == 0.0
    assert set(report["opponents"]) == {"random_bot"}


def test_eval_cli_json(tmp_path) -> None:
    runner = CliRunner()
    args = [
        "diplomacy",
        "eval",
        "--hero",
        "greedy_bot",
        "--opponents",
        "random_bot",
        "--games",
        "2",
        "--seed",
        "1",
        "--set",
        "max_years=2",
        "--json",
        "--out-dir",
        str(tmp_path),
        "--matchlog",
        str(tmp_path / "log.ndjson"),
    ]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    for key in ("win_rate", "mean_score", "mean_sos", "rating_before", "rating_after"):
        assert key in report["hero"]
    assert report["games"] == 2 and report["config"]["max_years"] == 2
    assert len(read_matches(tmp_path / "log.ndjson")) == 2


def test_eval_cli_errors_are_one_line() -> None:
    runner = CliRunner()
    out = runner.invoke(
        app, ["diplomacy", "eval", "--hero", "adapter_v3", "--opponents", "random_bot"]
    )
    assert out.exit_code == 2 and "unknown agent(s) adapter_v3" in out.output
    out = runner.invoke(
        app,
        [
            "diplomacy",
            "eval",
            "--hero",
            "random_bot",
            "--opponents",
            "random_bot",
            "--set",
            "max_years=0",
        ],
    )
    assert out.exit_code == 2 and "max_years" in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_eval_json_shows_progress_on_stderr_only() -> None:
    """A long eval is not silent: with a terminal (forced here) the games count on stderr while
    stdout holds the one JSON object."""
    import os
    import subprocess
    import sys

    args = [sys.executable, "-m", "leaguezero", "diplomacy", "eval", "--hero", "greedy_bot"]
    args += ["--opponents", "random_bot", "--games", "3", "--seed", "1", "--json"]
    args += ["--set", "max_years=1", "--set", "games_dir=null"]
    env = {**os.environ, "FORCE_COLOR": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == 1
    assert json.loads(done.stdout)["games"] == 3
    assert "eval greedy_bot vs random_bot" in done.stderr and "3/3" in done.stderr
