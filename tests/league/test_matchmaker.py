from __future__ import annotations

from collections import Counter

import pytest

from leaguezero.league.matchmaker import (
    BucketShares,
    PFSPMatchmaker,
    WinRateTable,
    exploit_weight,
)
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.types import Bucket, MatchResult, OpponentType, Participant

BASELINES = {"random": 800.0, "greedy": 1000.0, "oracle": 1600.0}
HERO = "hero"
HERO_ELO = 1300.0


@pytest.fixture
def league(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="m", baselines=BASELINES)
    with reg.update() as state:
        for step, elo in [(10, 1000.0), (20, 1150.0), (30, 1250.0), (40, 1280.0), (50, 1350.0)]:
            state.add_checkpoint(f"c{step}", path=None, step=step, elo=elo)
    return reg


def _shares(draws):
    counts = Counter(d.bucket for d in draws)
    return {b: counts[b] / len(draws) for b in counts}


def test_populated_league_matches_30_40_20_10(league):
    state = league.load()
    mm = PFSPMatchmaker(seed=123)
    buckets = mm.buckets(state, HERO, HERO_ELO)
    assert set(buckets[Bucket.PEERS]) == {"c30", "c40", "c50"}  # within +-100 of 1300
    # Every past checkpoint, c50 rated above the hero too: weights, not ratings, decide.
    assert set(buckets[Bucket.EXPLOITABLE]) == {"c10", "c20", "c30", "c40", "c50"}
    draws = mm.sample(state, HERO, HERO_ELO, k=10_000)
    shares = _shares(draws)
    for bucket, target in [
        (Bucket.MIRROR, 0.30),
        (Bucket.PEERS, 0.40),
        (Bucket.EXPLOITABLE, 0.20),
        (Bucket.BASELINES, 0.10),
    ]:
        assert abs(shares[bucket] - target) <= 0.02, f"{bucket}: {shares[bucket]:.3f}"
    for d in draws:
        if d.bucket == Bucket.MIRROR:
            assert d.opponent == HERO and d.opponent_type == OpponentType.SELF
        if d.bucket == Bucket.BASELINES:
            assert d.opponent in BASELINES and d.opponent_type == OpponentType.BASELINE
        if d.bucket == Bucket.EXPLOITABLE:
            assert d.opponent_type == OpponentType.HISTORICAL
    assert draws[0].to_event()["bucket"] in {b.value for b in Bucket}


def test_cold_start_draws_baselines_only(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="m", baselines=BASELINES)
    mm = PFSPMatchmaker(seed=0)
    draws = mm.sample(reg.load(), HERO, 1000.0, k=2000)
    assert {d.bucket for d in draws} == {Bucket.BASELINES}
    assert set(Counter(d.opponent for d in draws)) == set(BASELINES)
    with reg.update() as state:
        state.add_checkpoint("c0", path=None, step=0)
    assert {d.bucket for d in mm.sample(reg.load(), HERO, 1000.0, k=500)} == {Bucket.BASELINES}
    with reg.update() as state:
        state.add_checkpoint("c10", path=None, step=10)
    buckets = {d.bucket for d in mm.sample(reg.load(), HERO, 1000.0, k=500)}
    assert Bucket.MIRROR in buckets and Bucket.PEERS in buckets


def test_empty_bucket_renormalises_over_the_others(league):
    state = league.load()
    # A hero far above everyone: no peers; exploitable = all 5 checkpoints.
    draws = PFSPMatchmaker(seed=1).sample(state, HERO, 3000.0, k=10_000)
    shares = _shares(draws)
    assert Bucket.PEERS not in shares
    for bucket, target in [
        (Bucket.MIRROR, 0.5),
        (Bucket.EXPLOITABLE, 1 / 3),
        (Bucket.BASELINES, 1 / 6),
    ]:
        assert abs(shares[bucket] - target) <= 0.02


def test_exploitable_prefers_opponents_the_hero_still_loses_to(league):
    state = league.load()
    table = WinRateTable(decay=0.9)
    for _ in range(30):
        table.update("c10", 1.0)  # always beaten: drops out of the bucket
        table.update("c20", 0.0)  # still losing: top priority
        table.update("c30", 0.5)
    buckets = PFSPMatchmaker().buckets(state, HERO, HERO_ELO, table)
    exploit = buckets[Bucket.EXPLOITABLE]
    assert exploit["c10"] < 0.01
    assert exploit["c20"] > exploit["c30"] > exploit["c10"]
    assert exploit["c40"] == pytest.approx(0.25)  # unseen: 50% prior, (1 - 0.5)^2
    assert exploit_weight(0.25, "variance") == pytest.approx(0.1875)
    with pytest.raises(ValueError, match="weighting"):
        exploit_weight(0.5, "nope")


def test_win_rate_table_decays_and_round_trips():
    table = WinRateTable(decay=0.5, prior_games=0.0)
    table.update("a", 0.0)
    table.update("a", 1.0)  # the recent win weighs twice the old loss
    assert table.win_rate("a") == pytest.approx(1.0 / 1.5)
    match = MatchResult(participants=(Participant("x", 0, 1.0), Participant("hero", 1, 2.0)))
    table.update_from_matches([match], hero="hero")
    assert table.win_rate("x") == pytest.approx(1.0)
    back = WinRateTable.from_dict(table.to_dict())
    assert back.win_rate("a") == table.win_rate("a")
    with pytest.raises(ValueError, match="schema_version"):
        WinRateTable.from_dict({**table.to_dict(), "schema_version": 2})


def test_retired_checkpoints_are_never_drawn(league):
    with league.update() as state:
        state.agents["c30"].extra["retired"] = True
    draws = PFSPMatchmaker(seed=2).sample(league.load(), HERO, HERO_ELO, k=3000)
    assert "c30" not in {d.opponent for d in draws}


def test_tiered_mode_uses_the_spec_weights(league):
    state = league.load()
    mm = PFSPMatchmaker(mode="tiered", seed=4)
    draws = mm.sample(state, HERO, 1000.0, k=20_000)
    assert {d.bucket for d in draws} == {Bucket.TIERED}
    # Gaps to 1000: random 200 (2 x2), greedy 0 (5 x2), oracle 600 (0.5 x2), c10 0 (5),
    # c20 150 (2), c30 250 (2), c40 280 (2), c50 350 (0.5).
    weights = {"random": 4, "greedy": 10, "oracle": 1, "c10": 5, "c20": 2, "c30": 2}
    weights |= {"c40": 2, "c50": 0.5}
    total = sum(weights.values())
    counts = Counter(d.opponent for d in draws)
    for name, w in weights.items():
        assert abs(counts[name] / len(draws) - w / total) < 0.01, name


def test_seeded_draws_repeat_and_bad_settings_fail(league):
    state = league.load()
    a = [d.opponent for d in PFSPMatchmaker(seed=9).sample(state, HERO, HERO_ELO, k=50)]
    b = [d.opponent for d in PFSPMatchmaker(seed=9).sample(state, HERO, HERO_ELO, k=50)]
    assert a == b
    with pytest.raises(ValueError, match="sum to 1"):
        BucketShares(0.5, 0.5, 0.5, 0.0)
    with pytest.raises(ValueError, match="mode"):
        PFSPMatchmaker(mode="elo")
