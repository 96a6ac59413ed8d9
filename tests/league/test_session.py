"""LeagueSession with a toy game: real files, a real evaluator process, the live hero's own
rating, the elite rule, the exploitable bucket, retirement, resume and tracking."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from leaguezero.common.events import read_events
from leaguezero.league.config import LeagueSection
from leaguezero.league.matchlog import read_matches
from leaguezero.league.matchmaker import PFSPMatchmaker
from leaguezero.league.rating import expected_score
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.schedule import ELITE, FIRST, promotion_reasons
from leaguezero.league.session import BASE_MODEL, HERO, LeagueSession, checkpoint_name
from leaguezero.league.types import Bucket, MatchResult, Participant
from tests.league import toy_tournament

TOURNAMENT = toy_tournament.coin_tournament
BASELINES = {"random": 800.0, BASE_MODEL: 900.0, "greedy": 1000.0}


def _session(run: Path, **overrides) -> LeagueSession:
    cfg = LeagueSection(**{"eval_every": 4, "bootstrap": 0, **overrides})
    return LeagueSession(
        run,
        cfg,
        run_name="toy",
        baselines=BASELINES,
        anchor="random",
        tournament=TOURNAMENT,
        tournament_kwargs={"games_per_opponent": 6},
        seed=3,
        extra_gatekeepers=["greedy"],
    )


def _games(step: int, hero_strength: float, opponents: list[str], rng) -> list[MatchResult]:
    """Two-seat coin games of the hero against each drawn opponent (true strength: rating)."""
    strength = {**BASELINES, HERO: hero_strength}
    results = []
    for name in opponents:
        p = expected_score(strength[HERO], strength.get(name, 1000.0))
        won = float(rng.random() < p) if name != HERO else 0.5
        seats = (Participant(HERO, 0, won), Participant(name, 1, 1.0 - won))
        results.append(MatchResult(participants=seats, step=step, kind="training", game="coin"))
    return results


def _save(run: Path):
    def save(name: str) -> Path:
        path = run / "checkpoints" / f"{name}.pt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"weights")
        return path

    return save


def test_a_toy_league_runs_rates_checkpoints_and_resumes(tmp_path) -> None:
    run = tmp_path / "run"
    session = _session(run)
    assert session.hero_elo == BASELINES[BASE_MODEL]  # the hero starts as base_model
    rng = np.random.default_rng(0)
    added = []
    try:
        for step in range(1, 9):
            draws = session.sample(step, 4)
            session.record(step, _games(step, 1400.0, [d.opponent for d in draws], rng))
            agent = session.checkpoint(step, _save(run))
            added.append(agent)
            session.maybe_evaluate(step)
            session.end_step(step)
    finally:
        session.close(timeout=120)

    state = LeagueRegistry(run / "league.json").load()
    first = state.agents[checkpoint_name(1)]
    assert first.extra["reasons"][0] == FIRST and first.parent == BASE_MODEL
    assert first.path == "checkpoints/ckpt_000001.pt"
    # The snapshot joins at the live hero's own rating (it beat the baselines), not base_model's.
    assert added[0] is not None and added[0].elo > BASELINES[BASE_MODEL]
    # The hero keeps winning, so its own rating beats the best checkpoint's: elites join.
    elites = [a for a in added[1:] if a is not None and ELITE in a.extra["reasons"]]
    assert elites, [a and a.extra for a in added]
    events = read_events(run / "events.ndjson")
    summaries = [e for e in events if e["event"] == "league.step_summary"]
    assert [s["step"] for s in summaries] == list(range(1, 9))
    assert all(s["draws"] == 4 for s in summaries)
    # PFSP starts once two checkpoints exist: buckets beyond the baselines appear.
    assert {b for s in summaries for b in s["buckets"]} > {"baselines"}
    assert "baseline" in summaries[0]["win_rate_by_type"]
    # Steps 4 and 8 were rated by the evaluator process, with greedy as an extra gatekeeper.
    rated = [e for e in events if e["event"] == "league.elo_updated"]
    assert sorted(e["step"] for e in rated) == [4, 8]
    evaluation = read_matches(run / "league_matches.ndjson", kind="evaluation")
    assert {"greedy", "random"} <= {a for r in evaluation for a in r.agents}
    assert (run / "elo.png").exists()

    # Resume: the matchmaker RNG, win rates and the hero's rating come back.
    saved = session.state_dict()
    again = _session(run)
    try:
        again.load_state_dict(saved)
        assert again.hero_elo == session.hero_elo
        assert again.win_rates.to_dict() == session.win_rates.to_dict()
        ours = again.sample(9, 3)
        session.matchmaker.rng.bit_generator.state = saved["matchmaker_rng"]
        theirs = session.matchmaker.sample(LeagueRegistry(run / "league.json").load(), HERO,
                                           session.hero_elo, 3, session.win_rates)  # fmt: skip
        assert [d.opponent for d in ours] == [d.opponent for d in theirs]
        # A (challenger, step) already rated is never rated again (its games would repeat).
        assert not again.evaluate(8, rated[-1]["challenger"])
    finally:
        again.close(timeout=60)


def test_elite_rule_fires_on_the_heros_own_rating_and_never_on_an_inherited_one(tmp_path):
    session = _session(tmp_path)
    try:
        session.checkpoint(1, _save(tmp_path))  # first: joins at the hero's rating (900)
        state = session.registry.load()
        latest = state.latest_checkpoint
        # The old rule: the hero carried its newest checkpoint's rating, which can never beat
        # the best checkpoint's, so a new best never fired.
        assert ELITE not in promotion_reasons(7, latest.elo, state)
        wins = [
            MatchResult(participants=(Participant(HERO, 0, 1.0), Participant("greedy", 1, 0.0)))
            for _ in range(3)
        ]
        session.record(2, wins)
        assert session.hero_elo > latest.elo
        agent = session.checkpoint(7, _save(tmp_path))
        assert agent is not None and agent.extra["reasons"] == [ELITE]
        assert agent.elo == pytest.approx(session.hero_elo)
        # A margin asks for more than a new high score.
        strict = _session(tmp_path / "strict", elite_margin=500.0)
        strict.checkpoint(1, _save(tmp_path / "strict"))
        strict.record(2, wins)
        assert strict.checkpoint(7, _save(tmp_path / "strict")) is None
        strict.close(timeout=10)
    finally:
        session.close(timeout=10)


def test_exploitable_bucket_draws_the_checkpoints_the_hero_used_to_lose_to(tmp_path):
    session = _session(tmp_path, min_checkpoints=1)
    try:
        with session.registry.update() as state:
            for step, name in ((10, "lost_to"), (20, "beaten"), (30, "unplayed")):
                state.add_checkpoint(name, path=None, step=step, elo=950.0)

        # Its training record: it used to lose to one past self and always beat another.
        def game(opponent: str, hero_score: float) -> MatchResult:
            seats = (Participant(HERO, 0, hero_score), Participant(opponent, 1, 1.0 - hero_score))
            return MatchResult(participants=seats, kind="training")

        for _ in range(20):
            session.record(1, [game("lost_to", 0.0), game("beaten", 1.0)])
        state = session.registry.load()
        session.hero_elo = 1200.0  # the hero has since grown past them all
        buckets = session.matchmaker.buckets(state, HERO, session.hero_elo, session.win_rates)
        exploit = buckets[Bucket.EXPLOITABLE]
        assert exploit["lost_to"] > exploit["unplayed"] > exploit["beaten"]
        draws = session.sample(2, 4000)
        picked = [d.opponent for d in draws if d.bucket == Bucket.EXPLOITABLE]
        assert picked.count("lost_to") > 3 * picked.count("unplayed") > 0
        # A hero rated below its past selves (an LLM hero is rated from its sampled training
        # games, its checkpoints from greedy evaluations) still has them all in the bucket.
        low = PFSPMatchmaker(min_checkpoints=1).buckets(state, HERO, 700.0, session.win_rates)
        assert low[Bucket.EXPLOITABLE] == exploit
    finally:
        session.close(timeout=10)


def test_stale_curriculum_snapshots_are_retired_and_never_sampled(tmp_path) -> None:
    session = _session(tmp_path / "run", min_checkpoints=1)
    try:
        with session.registry.update() as state:
            # step: promotion reasons as the schedule would store them
            for step, reasons in [
                (1, ["first"]),
                (10, ["recent"]),
                (20, ["recent"]),
                (35, ["elite"]),
                (100, ["recent", "anchor"]),
                (150, ["recent"]),
                (190, ["recent"]),
            ]:
                name = checkpoint_name(step)
                state.add_checkpoint(name, path=None, step=step, extra={"reasons": reasons})
                state.agents[name].elo = 1000.0 + step  # the newest is the best
        retired = session.retire(200)
        # Kept: first, elite, anchor, within 100 steps (150, 190), and the best (190).
        assert retired == ["ckpt_000010", "ckpt_000020"]
        state = LeagueRegistry(tmp_path / "run" / "league.json").load()
        assert {n for n, a in state.agents.items() if a.extra.get("retired")} == set(retired)
        assert state.agents["ckpt_000010"].extra["retired"] == 200
        assert session.retire(201) == []  # already retired: nothing new, no event
        session.hero_elo = 1190.0
        draws = [d.opponent for d in session.sample(1, 1200)]
        assert not set(draws) & set(retired)
        assert {"ckpt_000001", "ckpt_000150"} <= set(draws)
    finally:
        session.close(timeout=10)
    events = read_events(tmp_path / "run" / "events.ndjson", "league.checkpoints_retired")
    assert [e["agents"] for e in events] == [retired]


def test_wandb_offline_logs_step_summaries_and_ratings(tmp_path) -> None:
    pytest.importorskip("wandb")
    os.environ["WANDB_SILENT"] = "true"
    session = _session(tmp_path, wandb=True)
    try:
        draws = session.sample(1, 5)
        session.record(1, _games(1, 1200.0, [d.opponent for d in draws], np.random.default_rng(1)))
        session.end_step(1)
        ratings = {"c1": 900.0, "random": 800.0}
        session.events.emit(
            "league.elo_updated", step=1, challenger="c1", ratings=ratings, baselines=["random"]
        )
        session.refresh_outputs()
        session.refresh_outputs()  # nothing new: no second copy
        assert session.tracker is not None and session.tracker._seen == 1
    finally:
        session.close(timeout=10)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_renamed_league_keys_are_read_with_a_warning_or_refused_when_they_disagree() -> None:
    with pytest.warns(FutureWarning, match=r"league\.k_factor is deprecated .* league\.elo_k"):
        cfg = LeagueSection.model_validate({"k_factor": 16})
    assert cfg.elo_k == 16
    with pytest.raises(ValueError, match=r"keep only league\.elo_k"):
        LeagueSection.model_validate({"k_factor": 16, "elo_k": 20})
    assert LeagueSection().bootstrap == 100 and LeagueSection().elo_k == 32.0


def test_resume_drops_unsaved_training_games_and_resubmits_a_killed_evaluation(tmp_path):
    """A run killed with an evaluation running and a step's games logged but its state
    unsaved: the resumed session logs each step's games once and still rates the checkpoint."""
    import signal
    import time

    run, rng = tmp_path / "run", np.random.default_rng(0)
    session = _session(run, eval_every=2)
    for step in (1, 2):
        session.record(step, _games(step, 1400.0, ["random", "greedy"], rng))
        session.checkpoint(step, _save(run))
        session.maybe_evaluate(step)
    saved = session.state_dict()  # the state of step 2: its evaluation pending
    latest = session.registry.load().latest_checkpoint.name  # the newest, at step 1 or 2
    assert [(j["challenger"], j["step"]) for j in saved["pending_evaluations"]] == [(latest, 2)]
    session.record(3, _games(3, 1400.0, ["random"], rng))  # step 3 logged, never saved
    os.kill(session.evaluator.running_pid(), signal.SIGKILL)  # the kill takes the job too
    deadline = time.monotonic() + 60
    while session.evaluator.runner.outcome(session.evaluator._running.handle) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    session.events.close()

    again = _session(run, eval_every=2)
    try:
        again.load_state_dict(saved)
        done = again.resume(2)
        assert done == {"step": 2, "dropped": 1, "resubmitted": [[latest, 2]]}
        assert not again.evaluate(2, latest)  # submitted once
    finally:
        again.close(timeout=120)
    training = read_matches(run / "league_matches.ndjson", kind="training")
    assert sorted(r.step for r in training) == [1, 1, 2, 2]
    evaluation = read_matches(run / "league_matches.ndjson", kind="evaluation")
    assert evaluation and {(r.meta["challenger"], r.step) for r in evaluation} == {(latest, 2)}
    (resumed,) = read_events(run / "events.ndjson", "league.resumed")
    assert resumed["resubmitted"] == [[latest, 2]]
    # Nothing left to do: a second resume changes nothing.
    third = _session(run, eval_every=2)
    try:
        third.load_state_dict(saved)
        assert third.resume(2) == {"step": 2, "dropped": 0, "resubmitted": []}
    finally:
        third.close(timeout=60)
