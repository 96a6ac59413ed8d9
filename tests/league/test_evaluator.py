"""The async evaluator in real background processes, with crashes and SIGKILL."""

from __future__ import annotations

import os
import signal
import time

import pytest

from leaguezero.common.events import read_events
from leaguezero.league.eval_job import EvalJob, check_tournament, choose_gatekeepers, run_evaluation
from leaguezero.league.evaluator import AsyncEvaluator
from leaguezero.league.matchlog import read_matches
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.tracking import elo_series, plot_elo
from tests.league import toy_tournament
from tests.league.toy_tournament import add_checkpoint, make_league

TOURNAMENT = toy_tournament.coin_tournament


@pytest.fixture
def run_dir(tmp_path):
    make_league(tmp_path)
    return tmp_path


def _job(run_dir, challenger, step, **kwargs):
    return EvalJob(
        registry_path=str(run_dir / "league.json"),
        matchlog_path=str(run_dir / "matches.ndjson"),
        events_path=str(run_dir / "events.ndjson"),
        challenger=challenger,
        step=step,
        tournament=TOURNAMENT,
        **kwargs,
    )


def test_gatekeepers_are_anchor_best_and_recent(run_dir):
    add_checkpoint(run_dir, "c10", 10, 900.0)
    add_checkpoint(run_dir, "c20", 20, 950.0)
    add_checkpoint(run_dir, "c30", 30, 1100.0)
    reg = LeagueRegistry(run_dir / "league.json")
    with reg.update() as state:
        state.set_ratings({"c10": 1200.0, "c20": 900.0})
    assert choose_gatekeepers(reg.load(), "c30") == ["random", "c10", "c20"]
    assert choose_gatekeepers(reg.load(), "c10") == ["random", "c20"]  # no earlier snapshot


def test_run_evaluation_rates_the_challenger_and_logs_everything(run_dir):
    add_checkpoint(run_dir, "c10", 10, 1300.0)
    summary = run_evaluation(
        _job(
            run_dir,
            "c10",
            10,
            gatekeepers=("random", "greedy"),
            tournament_kwargs={"games_per_opponent": 200},
        )
    )
    assert summary["games"] == 400
    state = LeagueRegistry(run_dir / "league.json").load()
    c10 = state.agents["c10"]
    assert c10.elo_low <= 1300.0 <= c10.elo_high  # true strength inside the interval
    assert state.agents["random"].elo == 800.0  # the anchor does not move
    assert c10.matches == 400 and state.best_agent == "c10"
    results = read_matches(run_dir / "matches.ndjson")
    assert len(results) == 400 and all(r.step == 10 and r.kind == "evaluation" for r in results)
    (event,) = read_events(run_dir / "events.ndjson", "league.elo_updated")
    assert event["challenger"] == "c10" and event["step"] == 10
    assert set(event["baselines"]) == {"random", "greedy"}
    series = elo_series(run_dir / "events.ndjson")
    assert series["Hero"] == [(10, event["ratings"]["c10"])]
    png = plot_elo(run_dir / "events.ndjson", run_dir / "elo.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_online_elo_method_moves_ratings_the_spec_way(run_dir):
    add_checkpoint(run_dir, "c10", 10, 2000.0)
    run_evaluation(
        _job(run_dir, "c10", 10, method="elo", tournament_kwargs={"games_per_opponent": 5})
    )
    state = LeagueRegistry(run_dir / "league.json").load()
    assert state.agents["c10"].elo > 800.0  # started at the anchor's rating, won nearly all
    assert state.agents["random"].elo == 800.0


def test_bad_tournaments_fail_fast():
    def local(*args, **kwargs):
        return []

    assert check_tournament(toy_tournament.coin_tournament) is toy_tournament.coin_tournament
    with pytest.raises(ValueError, match="not a function"):
        check_tournament("tests.league.toy_tournament:coin_tournament")
    with pytest.raises(ValueError, match="module-level function"):
        check_tournament(local)  # a fresh process could not find it
    with pytest.raises(ValueError, match="module-level function"):
        check_tournament(lambda *a, **k: [])


def test_background_evaluation_runs_while_training_continues(run_dir):
    events_path = run_dir / "events.ndjson"
    evaluator = AsyncEvaluator(
        registry_path=run_dir / "league.json",
        matchlog_path=run_dir / "matches.ndjson",
        events_path=events_path,
        tournament=TOURNAMENT,
        tournament_kwargs={"games_per_opponent": 30, "sleep": 1.0},
        every=10,
        bootstrap=20,
    )
    reg = LeagueRegistry(run_dir / "league.json")
    steps_while_evaluating = 0
    for step in range(0, 31):
        if step % 10 == 0:
            add_checkpoint(run_dir, f"c{step}", step, 900.0 + 10 * step)
            evaluator.maybe_submit(step, f"c{step}")
        # "training": a step of real work while the evaluator runs in another process.
        time.sleep(0.05)
        reg.load()
        if evaluator.running_pid() is not None:
            steps_while_evaluating += 1
        evaluator.poll()
    evaluator.close()
    assert steps_while_evaluating >= 10, "training did not continue while evaluating"
    done = [e["challenger"] for e in read_events(events_path, "league.evaluation_finished")]
    assert done[0] == "c0" and done[-1] == "c30"  # c10/c20 may be skipped if they queued
    skipped = [e["challenger"] for e in read_events(events_path, "league.evaluation_skipped")]
    assert sorted(done + skipped) == ["c0", "c10", "c20", "c30"]
    state = reg.load()
    assert state.agents["c30"].elo_low is not None


def test_crashed_evaluator_is_reported_and_retried(run_dir):
    add_checkpoint(run_dir, "c10", 10, 1200.0)
    marker = run_dir / "crashed-once"
    with AsyncEvaluator(
        registry_path=run_dir / "league.json",
        matchlog_path=run_dir / "matches.ndjson",
        events_path=run_dir / "events.ndjson",
        tournament=TOURNAMENT,
        tournament_kwargs={"crash_marker": str(marker), "games_per_opponent": 10},
        every=10,
        bootstrap=10,
    ) as evaluator:
        evaluator.submit(10, "c10")
    assert marker.exists()
    (failed,) = read_events(run_dir / "events.ndjson", "league.evaluation_failed")
    assert failed["exitcode"] == 3 and failed["retrying"] is True
    assert len(read_events(run_dir / "events.ndjson", "league.evaluation_finished")) == 1
    assert evaluator.completed and not evaluator.failed


def test_killed_evaluator_is_retried_and_never_corrupts_the_registry(run_dir):
    add_checkpoint(run_dir, "c10", 10, 1200.0)
    evaluator = AsyncEvaluator(
        registry_path=run_dir / "league.json",
        matchlog_path=run_dir / "matches.ndjson",
        events_path=run_dir / "events.ndjson",
        tournament=TOURNAMENT,
        tournament_kwargs={"sleep": 2.0, "games_per_opponent": 10},
        every=10,
        bootstrap=10,
    )
    evaluator.submit(10, "c10")
    pid = evaluator.running_pid()
    assert pid is not None
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)  # mid-run: while starting up or inside the tournament
    LeagueRegistry(run_dir / "league.json").load()  # readable right after the kill
    assert evaluator.wait(120)
    evaluator.close()
    (failed,) = read_events(run_dir / "events.ndjson", "league.evaluation_failed")
    assert failed["exitcode"] == -signal.SIGKILL and failed["retrying"] is True
    assert len(read_events(run_dir / "events.ndjson", "league.evaluation_finished")) == 1
    assert LeagueRegistry(run_dir / "league.json").load().agents["c10"].matches == 10  # vs "random"


def test_failing_tournament_gives_up_after_retries_and_leaves_registry_untouched(run_dir):
    add_checkpoint(run_dir, "c10", 10, 1200.0)
    before = LeagueRegistry(run_dir / "league.json").load().to_dict()
    with AsyncEvaluator(
        registry_path=run_dir / "league.json",
        matchlog_path=run_dir / "matches.ndjson",
        events_path=run_dir / "events.ndjson",
        tournament=toy_tournament.broken_tournament,
        every=10,
        max_retries=1,
    ) as evaluator:
        evaluator.submit(10, "c10")
    failures = read_events(run_dir / "events.ndjson", "league.evaluation_failed")
    assert [f["attempt"] for f in failures] == [0, 1]
    assert [f["retrying"] for f in failures] == [True, False]
    errors = read_events(run_dir / "events.ndjson", "league.evaluation_error")
    assert len(errors) == 2 and "the game blew up" in errors[0]["error"]
    assert evaluator.failed and not evaluator.completed
    assert LeagueRegistry(run_dir / "league.json").load().to_dict() == before


def test_an_evaluation_is_rated_once_however_often_it_runs(run_dir):
    """A resumed run resubmits the jobs its killed predecessor had pending; one that finished
    (or an orphan that finishes first) must not log its seeded games twice."""
    add_checkpoint(run_dir, "c10", 10, 1300.0)
    job = _job(run_dir, "c10", 10, gatekeepers=("random",), bootstrap=0)
    first = run_evaluation(job)
    before = LeagueRegistry(run_dir / "league.json").load().agents["c10"]
    again = run_evaluation(job)
    assert first["games"] > 0 and again == {"challenger": "c10", "step": 10, "already_rated": True}
    results = read_matches(run_dir / "matches.ndjson")
    assert len(results) == first["games"]
    assert all(r.meta["challenger"] == "c10" for r in results)
    assert LeagueRegistry(run_dir / "league.json").load().agents["c10"] == before
    assert len(read_events(run_dir / "events.ndjson", "league.evaluation_already_rated")) == 1
    # Another step of the same checkpoint is another evaluation.
    assert run_evaluation(_job(run_dir, "c10", 12, gatekeepers=("random",), bootstrap=0))["games"]
