"""The league loop retires curriculum snapshots that left the recent window (spec §1)."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train import HERO, RETIRED_EVENT, LeagueTrainer
from leaguezero.league.matchmaker import WinRateTable
from leaguezero.league.registry import LeagueRegistry


def test_stale_curriculum_snapshots_are_retired_and_never_sampled(tmp_path) -> None:
    cfg = load_config(
        DiplomacyConfig, None, ["train.hidden=8", "train.layers=0", "league.min_checkpoints=1"]
    )
    trainer = LeagueTrainer(cfg, tmp_path / "run")
    try:
        with trainer.registry.update() as state:
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
                name = f"hero_v{step:04d}"
                state.add_checkpoint(name, path=None, step=step, extra={"reasons": reasons})
                state.agents[name].elo = 1000.0 + step  # the newest is the best
        retired = trainer._retire_stale(200)
        # Kept: first, elite, anchor, within 100 steps (150, 190), and the best (190).
        assert retired == ["hero_v0010", "hero_v0020"]
        state = LeagueRegistry(tmp_path / "run" / "league.json").load()
        assert {n for n, a in state.agents.items() if a.extra.get("retired")} == set(retired)
        assert state.agents["hero_v0010"].extra["retired"] == 200
        assert trainer._retire_stale(201) == []  # already retired: nothing new, no event
        draws = [
            d.opponent
            for _ in range(200)
            for d in trainer.matchmaker.sample(state, HERO, 1190.0, 6, WinRateTable())
        ]
        assert not set(draws) & set(retired)
        assert {"hero_v0001", "hero_v0150"} <= set(draws)
    finally:
        trainer.evaluator.close()
        trainer.events.close()
    events = read_events(tmp_path / "run" / "events.ndjson")
    assert [e["agents"] for e in events if e["event"] == RETIRED_EVENT] == [retired]
