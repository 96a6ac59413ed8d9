from __future__ import annotations

import json

import pytest

from leaguezero.league.registry import REGISTRY_SCHEMA_VERSION, LeagueRegistry, RegistryError
from leaguezero.league.types import AgentKind

YATZY_BASELINES = {"random": 800.0, "greedy": 1000.0, "oracle": 1400.0}


def test_cold_start_holds_only_the_baselines(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="r1", baselines=YATZY_BASELINES)
    state = reg.load()
    assert set(state.agents) == set(YATZY_BASELINES)
    assert all(a.type == AgentKind.BASELINE and a.path is None for a in state.agents.values())
    assert state.checkpoints == [] and state.latest_step == 0
    assert state.best_agent is None and state.best_elo == float("-inf")
    assert state.anchor == ("random", 800.0)
    raw = json.loads((tmp_path / "league.json").read_text())
    assert raw["schema_version"] == REGISTRY_SCHEMA_VERSION
    assert raw["metadata"]["run_name"] == "r1"
    assert raw["agents"]["oracle"] == {
        "type": "baseline",
        "elo": 1400.0,
        "matches": 0,
        "path": None,
        "step": None,
        "created_at": None,
        "parent": None,
        "elo_low": None,
        "elo_high": None,
    }


def test_create_keeps_an_existing_league(tmp_path):
    path = tmp_path / "league.json"
    reg = LeagueRegistry.create(path, run_name="r1", baselines=YATZY_BASELINES)
    with reg.update() as state:
        state.add_checkpoint("c10", path=None, step=10)
    again = LeagueRegistry.create(path, run_name="other", baselines={"x": 1.0})
    assert "c10" in again.load().agents
    with pytest.raises(RegistryError, match="already exists"):
        LeagueRegistry.create(path, run_name="r", baselines={"x": 1.0}, exist_ok=False)


def test_lineage_initial_rating_and_best(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="r", baselines=YATZY_BASELINES)
    with reg.update() as state:
        first = state.add_checkpoint("c0", path=None, step=0)
        assert first.parent is None and first.elo == 800.0  # the anchor's rating
        state.set_ratings({"c0": 1100.0}, step=0)
        second = state.add_checkpoint("c10", path=None, step=10)
        assert second.parent == "c0" and second.elo == 1100.0  # inherits its parent's rating
        state.set_ratings({"c10": 1300.0, "ghost": 5.0}, intervals={"c10": (1250, 1350)})
    state = reg.load()
    assert "ghost" not in state.agents
    assert state.best_agent == "c10" and state.best_elo == 1300.0
    assert (state.agents["c10"].elo_low, state.agents["c10"].elo_high) == (1250.0, 1350.0)
    assert state.latest_step == 10 and state.latest_checkpoint.name == "c10"
    assert [h["event"] for h in state.history] == [
        "checkpoint_added",
        "elo_updated",
        "checkpoint_added",
        "elo_updated",
    ]
    with reg.update() as state, pytest.raises(RegistryError, match="already in the league"):
        state.add_checkpoint("c10", path=None, step=20)
    with reg.update() as state, pytest.raises(RegistryError, match="not in the league"):
        state.add_checkpoint("c20", path=None, step=20, parent="nope")


def test_failed_update_leaves_the_file_untouched(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="r", baselines=YATZY_BASELINES)
    before = reg.path.read_text()
    with pytest.raises(ZeroDivisionError), reg.update() as state:
        state.agents["random"].elo = 0.0
        _ = 1 / 0
    assert reg.path.read_text() == before


def test_reconcile_drops_checkpoints_whose_files_are_gone(tmp_path):
    reg = LeagueRegistry.create(tmp_path / "league.json", run_name="r", baselines=YATZY_BASELINES)
    (tmp_path / "ckpt").mkdir()
    for step in (10, 20, 30):
        (tmp_path / "ckpt" / f"c{step}.pt").write_bytes(b"weights")
        with reg.update() as state:
            state.add_checkpoint(f"c{step}", path=f"ckpt/c{step}.pt", step=step, elo=1000 + step)
    (tmp_path / "ckpt" / "c30.pt").unlink()
    (tmp_path / "ckpt" / "c10.pt").unlink()
    assert reg.reconcile() == ["c10", "c30"]
    state = reg.load()
    assert [a.name for a in state.checkpoints] == ["c20"]
    assert state.best_agent == "c20"  # the best moved off the dropped c30
    assert state.history[-1]["event"] == "checkpoints_dropped"
    assert set(YATZY_BASELINES) <= set(state.agents)
    assert reg.reconcile() == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "unreadable"),
        (json.dumps({"schema_version": 99, "agents": {}}), "schema_version 99"),
        (json.dumps([1, 2]), "JSON object"),
        (json.dumps({"schema_version": 1, "agents": {"a": {"elo": 1}}}), "malformed"),
    ],
)
def test_bad_files_are_clear_errors_never_resets(tmp_path, content, message):
    path = tmp_path / "league.json"
    path.write_text(content)
    with pytest.raises(RegistryError, match=message):
        LeagueRegistry(path).load()
    with pytest.raises(RegistryError, match=message):
        LeagueRegistry.create(path, run_name="r", baselines=YATZY_BASELINES)
    assert path.read_text() == content


def test_missing_file_says_how_to_fix(tmp_path):
    with pytest.raises(RegistryError, match="create the league first"):
        LeagueRegistry(tmp_path / "league.json").load()
