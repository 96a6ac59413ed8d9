"""The engine wrapper on the real engine: phases, year cap, copies, saved games."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.game.bots import RandomBot
from leaguezero.diplomacy.game.env import (
    POWERS,
    DiplomacyEnv,
    SavedGameError,
    load_saved_game,
    phase_year,
)


def play(env: DiplomacyEnv, seed: int = 0, phases: int | None = None) -> None:
    bots = {power: RandomBot(seed + i) for i, power in enumerate(POWERS)}
    done = 0
    while not env.done and (phases is None or done < phases):
        for power in POWERS:
            env.set_orders(power, bots[power].get_orders(env, power))
        env.process()
        done += 1


def test_new_game_is_no_press_spring_1901() -> None:
    env = DiplomacyEnv()
    assert env.phase == "S1901M" and env.phase_type == "M" and env.year == 1901
    assert "NO_PRESS" in env.game.rules
    assert env.orderable_locations("FRANCE") == ["BRE", "MAR", "PAR"]
    legal = env.legal_orders("FRANCE")
    assert "A PAR - BUR" in legal["PAR"] and legal["PAR"] == sorted(legal["PAR"])
    assert env.adjustment_count("FRANCE") == 0
    assert phase_year("F1905R") == 1905 and phase_year("COMPLETED") is None


def test_year_cap_ends_the_game_after_the_last_year() -> None:
    env = DiplomacyEnv(max_years=2)
    years = []
    while not env.done:
        years.append(env.year)
        play(env, phases=1)
    assert max(years) == 1902 and env.ended_by_cap
    assert env.phase == "COMPLETED" and env.phase_type == "-"
    with pytest.raises(RuntimeError, match="over"):
        env.process()


def test_copy_is_independent_and_equal() -> None:
    env = DiplomacyEnv(max_years=3)
    play(env, phases=3)
    clone = env.copy()
    assert clone.phase == env.phase
    assert clone.legal_orders("RUSSIA") == env.legal_orders("RUSSIA")
    before = {p: env.units(p) for p in POWERS}
    play(clone, seed=5, phases=2)
    assert {p: env.units(p) for p in POWERS} == before
    assert clone.phase != env.phase


def test_saved_game_round_trip(tmp_path) -> None:
    env = DiplomacyEnv(max_years=2)
    play(env, seed=3)
    path = env.save(tmp_path / "game.json", {"note": "test"})
    game, block = load_saved_game(path)
    assert block["note"] == "test" and block["max_years"] == 2 and block["ended_by_cap"]
    assert [str(p) for p in game.state_history] == [str(p) for p in env.game.state_history]
    for power in POWERS:
        assert sorted(game.powers[power].centers) == sorted(env.centers(power))
    # The engine's order history replays to the same final board.
    replay = DiplomacyEnv(max_years=None)
    for phase, orders in env.game.order_history.items():
        if str(phase) != replay.phase:
            break
        for power, power_orders in orders.items():
            replay.game.set_orders(power, list(power_orders))
        replay.process()
    for power in POWERS:
        assert sorted(replay.centers(power)) == sorted(env.centers(power))


def test_saved_game_errors(tmp_path) -> None:
    with pytest.raises(SavedGameError, match="does not exist"):
        load_saved_game(tmp_path / "missing.json")
    env = DiplomacyEnv(max_years=1)
    saved = env.to_saved_game()
    saved["leaguezero"]["schema_version"] = 99
    (tmp_path / "old.json").write_text(json.dumps(saved))
    with pytest.raises(SavedGameError, match="schema_version 99"):
        load_saved_game(tmp_path / "old.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SavedGameError, match="not JSON"):
        load_saved_game(tmp_path / "bad.json")


def test_direct_board_edits_need_invalidate() -> None:
    env = DiplomacyEnv()
    assert "PAR" in env.legal_orders("FRANCE")
    env.game.set_units("FRANCE", ["A BUR"], reset=True)
    assert "PAR" in env.legal_orders("FRANCE")  # cached for this phase
    env.invalidate()
    assert list(env.legal_orders("FRANCE")) == ["BUR"]
