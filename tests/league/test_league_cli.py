"""`leaguezero league show/refit/plot` as real subprocesses on a real run directory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from leaguezero.league.eval_job import EvalJob, run_evaluation
from leaguezero.league.evaluator import evaluator_paths
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.schedule import promote_if_scheduled
from tests.league import toy_tournament


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", "league", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def run_dir(tmp_path):
    paths = evaluator_paths(tmp_path)
    reg = LeagueRegistry.create(paths["registry"], run_name="cli", baselines={"random": 800.0})
    for step in (0, 10):
        promote_if_scheduled(reg, name=f"c{step}", path=None, step=step, current_elo=0.0)
        run_evaluation(
            EvalJob(
                registry_path=str(paths["registry"]),
                matchlog_path=str(paths["matchlog"]),
                events_path=str(paths["events"]),
                challenger=f"c{step}",
                step=step,
                tournament=toy_tournament.coin_tournament,
                tournament_kwargs={"games_per_opponent": 20},
                bootstrap=20,
            )
        )
    return tmp_path


def test_show_prints_agents_and_matches(run_dir):
    shown = _cli("show", str(run_dir), "--recent", "3")
    assert shown.returncode == 0, shown.stderr
    assert "c10" in shown.stdout and "random" in shown.stdout and "interval" in shown.stdout
    data = json.loads(_cli("show", str(run_dir), "--json", "--recent", "3").stdout)
    assert set(data["agents"]) == {"random", "c0", "c10"}
    assert len(data["recent_matches"]) == 3
    assert data["agents"]["c10"]["parent"] == "c0"


def test_refit_and_plot(run_dir):
    before = LeagueRegistry(run_dir / "league.json").load().ratings()
    done = _cli("refit", str(run_dir), "--bootstrap", "20")
    assert done.returncode == 0, done.stderr
    assert "from 60 evaluation matches" in done.stdout
    after = LeagueRegistry(run_dir / "league.json").load().ratings()
    # The evaluator refits the same log with the same seed, so a refit reproduces it.
    assert after == pytest.approx(before)
    plotted = _cli("plot", str(run_dir))
    assert plotted.returncode == 0, plotted.stderr
    assert (run_dir / "league_elo.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_registry_is_a_one_line_error(tmp_path):
    (tmp_path / "league.json").write_text('{"schema_version": 7, "agents": {}}')
    out = _cli("show", str(tmp_path))
    assert out.returncode == 2
    assert "schema_version 7" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("key", "value"), [("best_elo", "high"), ("anchor_elo", [1]), ("run_name", 5)]
)
def test_metadata_of_the_wrong_type_is_a_one_line_error(run_dir, key, value):
    path = run_dir / "league.json"
    data = json.loads(path.read_text())
    data["metadata"][key] = value
    path.write_text(json.dumps(data))
    for command in ("show", "refit"):
        out = _cli(command, str(run_dir))
        assert out.returncode == 2, out.stdout
        assert f"metadata.{key} must be" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_show_gives_ratings_relative_to_base_model_only_when_the_league_has_it(tmp_path):
    from typer.testing import CliRunner

    from leaguezero.league.cli import app

    paths = evaluator_paths(tmp_path)
    reg = LeagueRegistry.create(
        paths["registry"], run_name="rel", baselines={"random": 800.0, "base_model": 1000.0}
    )
    promote_if_scheduled(reg, name="c10", path=None, step=10, current_elo=1250.0, elo=1250.0)
    data = json.loads(CliRunner().invoke(app, ["show", str(tmp_path), "--json"]).output)
    assert data["relative_to"] == "base_model"
    relative = {name: a["elo_relative"] for name, a in data["agents"].items()}
    assert relative == {"c10": 250.0, "base_model": 0.0, "random": -200.0}
    shown = CliRunner().invoke(app, ["show", str(tmp_path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "vs base_model" in shown.output and "+250" in shown.output


def test_show_without_base_model_gives_absolute_ratings_only(run_dir):
    from typer.testing import CliRunner

    from leaguezero.league.cli import app

    data = json.loads(CliRunner().invoke(app, ["show", str(run_dir), "--json"]).output)
    assert data["relative_to"] is None
    assert all(a["elo_relative"] is None for a in data["agents"].values())
    shown = CliRunner().invoke(app, ["show", str(run_dir)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "vs base_model" not in shown.output
