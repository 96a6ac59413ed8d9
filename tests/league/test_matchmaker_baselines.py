"""PFSP inside the baselines share (``league.baselines_weighting: pfsp``): the fixed bots the
hero still loses to are drawn more, by the same weighting as the exploitable bucket."""

from __future__ import annotations

import pytest

from leaguezero.league.matchmaker import Bucket, BucketShares, PFSPMatchmaker, WinRateTable
from leaguezero.league.registry import LeagueState
from leaguezero.league.types import AgentInfo, AgentKind


def _league() -> LeagueState:
    state = LeagueState()
    for name, elo in (("random_bot", 800.0), ("dumb_bot", 1300.0)):
        state.agents[name] = AgentInfo(name=name, type=AgentKind.BASELINE, elo=elo)
    return state


def _rates() -> WinRateTable:
    table = WinRateTable(decay=1.0, prior_games=0.0)
    for _ in range(10):
        table.update("random_bot", 1.0)  # always beaten
    for score in (1.0, 0.0, 0.0, 0.0):
        table.update("dumb_bot", score)  # beaten one game in four
    return table


def test_uniform_baselines_ignore_win_rates() -> None:
    mm = PFSPMatchmaker(min_checkpoints=0)
    weights = mm.buckets(_league(), "hero", 1000.0, _rates())[Bucket.BASELINES]
    assert weights == {"random_bot": 1.0, "dumb_bot": 1.0}


def test_pfsp_baselines_follow_the_hard_weighting() -> None:
    mm = PFSPMatchmaker(min_checkpoints=5, baselines_weighting="pfsp")  # cold start too
    weights = mm.buckets(_league(), "hero", 1000.0, _rates())[Bucket.BASELINES]
    assert weights["random_bot"] == 0.0
    assert weights["dumb_bot"] == pytest.approx(0.75**2)
    shares = BucketShares(0.0, 0.0, 0.0, 1.0)
    mm = PFSPMatchmaker(shares=shares, min_checkpoints=0, baselines_weighting="pfsp", seed=1)
    draws = mm.sample(_league(), "hero", 1000.0, k=50, win_rates=_rates())
    assert {d.opponent for d in draws} == {"dumb_bot"}


def test_pfsp_baselines_fall_back_to_uniform_when_every_bot_is_always_beaten() -> None:
    table = WinRateTable(decay=1.0, prior_games=0.0)
    for name in ("random_bot", "dumb_bot"):
        table.update(name, 1.0)
    mm = PFSPMatchmaker(min_checkpoints=0, baselines_weighting="pfsp")
    weights = mm.buckets(_league(), "hero", 1000.0, table)[Bucket.BASELINES]
    assert weights == {"random_bot": 1.0, "dumb_bot": 1.0}
    with pytest.raises(ValueError, match="baselines weighting"):
        PFSPMatchmaker(baselines_weighting="hardest")
