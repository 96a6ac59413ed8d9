"""The benchmark suite inside the league: the evaluator's fixed gatekeepers, each evaluation's
per-opponent record, and ratings relative to base_model in train-report."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diplomacy")

from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bench import DEFAULT_SUITE, suite_gatekeepers, suite_results
from leaguezero.diplomacy.train.league_eval import (
    BASELINES,
    evaluation_gatekeepers,
    league_baselines,
)
from leaguezero.diplomacy.train.loop import LeagueTrainer
from leaguezero.diplomacy.train.report import summarize_run
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.tracking import elo_series

TINY = [
    "max_years=1",
    "train.group_size=2",
    "train.steps=1",
    "model.hidden=16",
    "model.layers=1",
    "league.eval_every=1",
    "league.eval_games=1",
    "league.bootstrap=0",
    "games_dir=null",
]
SUITE = [entry.agent for entry in DEFAULT_SUITE]


def test_every_suite_opponent_is_a_fixed_gatekeeper_and_a_rated_baseline() -> None:
    for all_baselines in (True, False):
        cfg = DiplomacyConfig(
            league={"eval_all_baselines": all_baselines}, bench={"checkpoints": ["frozen.pt"]}
        )
        keepers = evaluation_gatekeepers(cfg)
        assert keepers[: len(SUITE) + 1] == [*SUITE, "frozen.pt"]  # the suite, always
        assert suite_gatekeepers(["frozen.pt"]) == [*SUITE, "frozen.pt"]
        assert ("base_model" in keepers) is all_baselines
        baselines = league_baselines(cfg)
        assert set(keepers) <= set(baselines)  # every gatekeeper is an agent of the league
        assert set(BASELINES) <= set(baselines)
    ratings = league_baselines(DiplomacyConfig())
    # greedy_bot measured between chaos_bot and dumb_bot (docs/results/diplomacy_bench.md).
    assert ratings["chaos_bot"] < ratings["greedy_bot"] < ratings["dumb_bot"]


def test_suite_results_mark_each_floor() -> None:
    rows = suite_results(DEFAULT_SUITE, {"random_bot": [1.0, 1.0], "dumb_bot": [0.0, 0.5]})
    by = {row["agent"]: row for row in rows}
    assert by["random_bot"] == {
        "agent": "random_bot", "tier": "trivial", "floor": 0.95, "games": 2,
        "win_rate": 1.0, "passed": True,
    }  # fmt: skip
    assert by["dumb_bot"]["win_rate"] == 0.25 and by["dumb_bot"]["passed"] is True
    assert by["chaos_bot"]["games"] == 0 and by["chaos_bot"]["passed"] is None


def test_a_one_step_run_evaluates_against_the_suite_and_reports_relative_ratings(
    tmp_path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    old = {"random_bot": 800.0, "base_model": 1000.0, "chaos_bot": 900.0, "dumb_bot": 1300.0}
    # A league.json from before greedy_bot joined: the trainer adds the missing baseline.
    LeagueRegistry.create(run / "league.json", run_name="run", baselines=old, anchor="random_bot")
    cfg = load_config(DiplomacyConfig, None, TINY)
    trainer = LeagueTrainer(cfg, run)
    try:
        trainer.train_step()
    finally:
        trainer.session.close(timeout=240)
        trainer.hero.close()
    assert "greedy_bot" in LeagueRegistry(run / "league.json").load().agents

    (finished,) = read_events(run / "events.ndjson", "league.evaluation_finished")
    assert set(SUITE) <= set(finished["gatekeepers"])
    rows = {row["agent"]: row for row in finished["suite"]}
    assert list(rows) == SUITE
    for entry in DEFAULT_SUITE:
        row = rows[entry.agent]
        assert row["games"] == 1 and 0.0 <= row["win_rate"] <= 1.0
        assert row["floor"] == round(entry.floor, 4)
        assert row["passed"] is (row["win_rate"] >= entry.floor)
    assert finished["suite_informational"] is True and finished["suite_max_years"] == 1

    (evaluation,) = summarize_run(run)["evaluations"]
    assert evaluation["suite"] == finished["suite"]
    assert evaluation["relative_to"] == "base_model"
    base = evaluation["baselines"]
    relative = evaluation["baselines_relative"]
    assert relative["base_model"] == 0.0
    for name, elo in base.items():
        assert relative[name] == pytest.approx(elo - base["base_model"])
    assert evaluation["hero_elo_relative"] == pytest.approx(
        evaluation["hero_elo"] - base["base_model"]
    )

    # The Elo chart's relative panel: every line minus base_model's rating in that evaluation.
    assert elo_series(run / "events.ndjson", relative=True)["Baseline:base_model"] == [(1, 0.0)]
    assert (run / "elo.png").exists()

    shown = CliRunner().invoke(app, ["diplomacy", "train-report", str(run), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["evaluations"][0]["relative_to"] == "base_model"
    text = CliRunner().invoke(app, ["diplomacy", "train-report", str(run)])
    assert text.exit_code == 0, text.output
    assert "vs base_model]" in text.output and "suite (informational): random_bot" in text.output


def test_train_report_without_base_model_shows_absolute_ratings_only(tmp_path) -> None:
    from leaguezero.common.events import EventWriter

    with EventWriter(tmp_path / "events.ndjson") as events:
        events.emit(
            "league.elo_updated", step=5, challenger="ckpt_000005",
            ratings={"random_bot": 800.0, "ckpt_000005": 900.0}, baselines=["random_bot"],
        )  # fmt: skip
    (evaluation,) = summarize_run(tmp_path)["evaluations"]
    assert evaluation["relative_to"] is None and evaluation["hero_elo_relative"] is None
    assert evaluation["baselines_relative"] is None and evaluation["suite"] is None
    text = CliRunner().invoke(app, ["diplomacy", "train-report", str(tmp_path)])
    assert text.exit_code == 0, text.output
    assert "elo 900  (random_bot 800)" in text.output and "vs base_model" not in text.output


def test_train_report_judges_pfsp_shares_against_the_runs_targets(tmp_path) -> None:
    """Shares ± SE from the end of cold start or ``--from-step``, each against the config's
    own target ± 3 points, and whom the draws seated (the hero, its checkpoints, each bot)."""
    from leaguezero.common.events import EventWriter

    (tmp_path / "config.yaml").write_text(
        "league:\n  min_checkpoints: 1\n  mirror_share: 0.5\n  peers_share: 0.3\n"
        "  exploitable_share: 0.1\n  baselines_share: 0.1\n"
    )
    draws = {  # step -> (bucket, opponent, opponent_type) drawn that step
        1: [("baselines", "dumb_bot", "baseline")] * 4,  # cold start: before the checkpoint
        3: [("mirror", "hero", "self")] * 5 + [("peers", "ckpt_000002", "historical")] * 3
        + [("exploitable", "ckpt_000002", "historical"), ("baselines", "dumb_bot", "baseline")],
        4: [("mirror", "hero", "self")] * 2 + [("peers", "chaos_bot", "baseline")] * 8,
    }  # fmt: skip
    with EventWriter(tmp_path / "events.ndjson") as events:
        events.emit("league.checkpoint_added", step=2, agent="ckpt_000002")
        for step, drawn in draws.items():
            for bucket, opponent, kind in drawn:
                events.emit(
                    "league.opponent_sampled", step=step, bucket=bucket, opponent=opponent,
                    opponent_type=kind, probability=1.0,
                )  # fmt: skip

    pfsp = summarize_run(tmp_path)["pfsp"]
    assert pfsp["from_step"] == 3 and pfsp["draws"] == 20
    assert pfsp["targets"] == {"mirror": 0.5, "peers": 0.3, "exploitable": 0.1, "baselines": 0.1}
    assert pfsp["shares"] == {"mirror": 0.35, "peers": 0.55, "exploitable": 0.05, "baselines": 0.05}
    assert pfsp["se"]["mirror"] == pytest.approx((0.35 * 0.65 / 20) ** 0.5)
    assert pfsp["within_tolerance"] == {
        "mirror": False, "peers": False, "exploitable": False, "baselines": False
    }  # fmt: skip
    assert pfsp["opponents"] == {
        "chaos_bot": 0.4, "self": 0.35, "checkpoints": 0.2, "dumb_bot": 0.05
    }  # fmt: skip

    late = summarize_run(tmp_path, from_step=4)["pfsp"]
    assert late["from_step"] == 4 and late["draws"] == 10
    assert late["shares"]["mirror"] == 0.2 and late["opponents"] == {"chaos_bot": 0.8, "self": 0.2}

    shown = CliRunner().invoke(app, ["diplomacy", "train-report", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "PFSP from step 3 (20 draws): mirror 35.0% ± 10.7" in shown.output
    assert "against 50/30/10/10 ± 3: mirror 15.0 under (1.4 SE), peers 25.0 over" in shown.output
    assert "opponents drawn: chaos_bot 40.0%  itself 35.0%  its checkpoints 20.0%" in shown.output
    shown = CliRunner().invoke(
        app, ["diplomacy", "train-report", str(tmp_path), "--from-step", "4"]
    )
    assert "PFSP from step 4 (10 draws)" in shown.output, shown.output


def test_train_report_marks_a_share_within_three_points_ok(tmp_path) -> None:
    from leaguezero.common.events import EventWriter

    with EventWriter(tmp_path / "events.ndjson") as events:
        events.emit("league.checkpoint_added", step=1, agent="ckpt_000001")
        events.emit("league.checkpoint_added", step=2, agent="ckpt_000002")
        drawn = [("mirror", "self")] * 31 + [("peers", "historical")] * 39
        drawn += [("exploitable", "historical")] * 18 + [("baselines", "baseline")] * 12
        for bucket, kind in drawn:
            events.emit(
                "league.opponent_sampled", step=3, bucket=bucket, opponent="random_bot",
                opponent_type=kind, probability=1.0,
            )  # fmt: skip
    pfsp = summarize_run(tmp_path)["pfsp"]  # no config: the spec's 30/40/20/10
    assert pfsp["within_tolerance"] == {
        "mirror": True, "peers": True, "exploitable": True, "baselines": True
    }  # fmt: skip
    shown = CliRunner().invoke(app, ["diplomacy", "train-report", str(tmp_path)])
    assert "mirror ok, peers ok, exploitable ok, baselines ok (max deviation 2.0 points)" in (
        shown.output
    ), shown.output
