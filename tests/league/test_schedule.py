from __future__ import annotations

import pytest

from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.schedule import (
    ANCHOR,
    ELITE,
    FIRST,
    RECENT,
    promotion_reasons,
    retire_candidates,
    should_add_to_league,
)


@pytest.fixture
def registry(tmp_path):
    return LeagueRegistry.create(tmp_path / "league.json", run_name="s", baselines={"random": 800})


def _add(registry, step, elo):
    with registry.update() as state:
        state.add_checkpoint(f"c{step}", path=None, step=step, elo=elo)


def test_first_checkpoint_always_joins(registry):
    for step in (0, 1, 7, 13, 99):
        assert should_add_to_league(step, -1e9, registry)
        assert promotion_reasons(step, -1e9, registry)[0] == FIRST


@pytest.mark.parametrize(
    ("step", "elo", "expected", "reasons"),
    [
        # latest checkpoint is at step 300 (elo 1200, the best)
        (310, 1000.0, True, [RECENT]),  # multiple of 10 after latest - 100
        (311, 1000.0, False, []),  # not a multiple of 10
        (210, 1000.0, True, [RECENT]),  # 210 > 300 - 100: just inside the window
        (200, 1000.0, True, [ANCHOR]),  # 200 = 300 - 100: outside the window, but an anchor
        (190, 1000.0, False, []),  # outside the window and no anchor
        (100, 1000.0, True, [ANCHOR]),
        (400, 1000.0, True, [RECENT, ANCHOR]),
        (313, 1200.0, False, []),  # equal to the best rating is not a new best
        (313, 1200.01, True, [ELITE]),  # a new best at any step
        (190, 1300.0, True, [ELITE]),
    ],
)
def test_boundaries(registry, step, elo, expected, reasons):
    _add(registry, 100, 1100.0)
    _add(registry, 300, 1200.0)
    state = registry.load()
    assert state.latest_step == 300 and state.best_elo == 1200.0
    assert should_add_to_league(step, elo, registry) is expected
    assert should_add_to_league(step, elo, state) is expected
    assert promotion_reasons(step, elo, state) == reasons


def test_walk_of_a_training_run(registry):
    """Every 10 steps of a run: which snapshots join with a flat rating."""
    added = []
    for step in range(0, 251):
        if should_add_to_league(step, 1000.0, registry):
            _add(registry, step, 1000.0)
            added.append(step)
    assert added == list(range(0, 251, 10))


def test_retire_candidates_keep_anchors_elites_best_and_recent(registry):
    with registry.update() as state:
        for step in range(0, 260, 10):
            reasons = promotion_reasons(step, 1000.0 + (50 if step == 130 else 0), state)
            state.add_checkpoint(
                f"c{step}", path=None, step=step, elo=1000.0, extra={"reasons": reasons}
            )
        state.agents["c40"].elo = 2000.0
        state.set_ratings({})
    state = registry.load()
    retired = retire_candidates(state.checkpoints, current_step=250, best_agent=state.best_agent)
    kept = {f"c{s}" for s in (0, 100, 200, 130, 40)} | {f"c{s}" for s in range(160, 260, 10)}
    assert set(retired) == {f"c{s}" for s in range(0, 160, 10)} - kept
    assert "c150" in retired and "c160" not in retired
