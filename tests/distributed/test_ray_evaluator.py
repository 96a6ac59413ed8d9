"""The league evaluator as Ray tasks on a real local cluster: ratings, a crashed worker, errors."""

from __future__ import annotations

import pytest

from leaguezero.common.events import read_events
from leaguezero.league.registry import LeagueRegistry
from tests.league import toy_tournament
from tests.league.toy_tournament import add_checkpoint, make_league

pytest.importorskip("ray")

TOURNAMENT = toy_tournament.coin_tournament


@pytest.fixture
def run_dir(tmp_path):
    make_league(tmp_path)
    for name, step, strength in (("c10", 10, 1200.0), ("c20", 20, 1300.0)):
        add_checkpoint(tmp_path, name, step, strength)
    return tmp_path


def _evaluator(run_dir, **kwargs):
    from leaguezero.distributed.evaluator import RayJobRunner
    from leaguezero.league.evaluator import AsyncEvaluator

    return AsyncEvaluator(
        runner=RayJobRunner(),
        registry_path=run_dir / "league.json",
        matchlog_path=run_dir / "matches.ndjson",
        events_path=run_dir / "events.ndjson",
        every=10,
        bootstrap=10,
        **{"tournament": TOURNAMENT, **kwargs},
    )


def test_ray_task_rates_every_nth_step(ray_cluster, run_dir):
    with _evaluator(run_dir, tournament_kwargs={"games_per_opponent": 20}) as evaluator:
        submitted = [evaluator.maybe_submit(step, "c10") for step in (5, 10)]
        assert submitted == [False, True] and evaluator.busy
        assert evaluator.wait(120)
    assert evaluator.completed and not evaluator.failed
    (done,) = read_events(run_dir / "events.ndjson", "league.evaluation_finished")
    assert done["challenger"] == "c10" and done["games"] == 40  # vs random and greedy
    state = LeagueRegistry(run_dir / "league.json").load()
    assert state.agents["c10"].matches == 40 and state.agents["c10"].elo_low is not None


def test_worker_that_dies_mid_task_is_retried_and_registry_stays_whole(ray_cluster, run_dir):
    marker = run_dir / "crashed-once"
    kwargs = {"crash_marker": str(marker), "games_per_opponent": 10}
    with _evaluator(run_dir, tournament_kwargs=kwargs) as evaluator:
        evaluator.submit(20, "c20")
        assert evaluator.wait(120)
    assert marker.exists()  # the first attempt's worker process exited hard (os._exit)
    (failed,) = read_events(run_dir / "events.ndjson", "league.evaluation_failed")
    assert failed["retrying"] is True and failed["attempt"] == 0
    assert len(read_events(run_dir / "events.ndjson", "league.evaluation_finished")) == 1
    assert LeagueRegistry(run_dir / "league.json").load().agents["c20"].matches > 0


def test_failing_tournament_gives_up_after_retries(ray_cluster, run_dir):
    before = LeagueRegistry(run_dir / "league.json").load().to_dict()
    tournament = toy_tournament.broken_tournament
    with _evaluator(run_dir, tournament=tournament, max_retries=1) as evaluator:
        evaluator.submit(10, "c10")
        assert evaluator.wait(120)
    failures = read_events(run_dir / "events.ndjson", "league.evaluation_failed")
    assert [f["retrying"] for f in failures] == [True, False]
    assert evaluator.failed and not evaluator.completed
    assert LeagueRegistry(run_dir / "league.json").load().to_dict() == before
