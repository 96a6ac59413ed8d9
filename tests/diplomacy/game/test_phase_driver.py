"""The one phase driver (diplomacy/game/phase.py) on the real engine: what each seat was asked,
answered and submitted, and a rollout through it equal to the loop written out by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bots import make_bot
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.phase import SeatOrders, play_phase, validate_orders
from leaguezero.diplomacy.game.rollout import rollout_seed, run_rollout, seat_seed


def first_legal(legal: dict[str, list[str]]) -> list[str]:
    return [options[0] for options in legal.values()]


def test_each_seat_reports_what_it_was_asked_submitted_invalid_and_missing() -> None:
    env = DiplomacyEnv(max_years=2)
    asked = {p: env.legal_orders(p) for p in POWERS}
    answers = {
        "AUSTRIA": ["A VIE - XXX", "a bud - ser", "A BUD - GAL"],  # illegal, legal, 2nd for BUD
        "ENGLAND": None,  # nothing at all
        "FRANCE": ["F BRE - MAO", "A PAR - BUR", "A MAR - SPA"],
    }

    def orders_for(power: str, legal: dict[str, list[str]]) -> list[str] | None:
        assert legal == asked[power]
        return answers.get(power, first_legal(legal))

    seen: list[str] = []

    def on_seat(seat: SeatOrders) -> None:
        assert not env.game.get_orders(seat.power)  # shown before the engine gets them
        seen.append(seat.power)

    played = play_phase(env, orders_for, on_seat)

    assert played.phase == "S1901M" and env.phase == "F1901M"
    assert list(played.seats) == list(POWERS) == seen
    austria, england, france = (played.seats[p] for p in ("AUSTRIA", "ENGLAND", "FRANCE"))
    assert austria.legal == asked["AUSTRIA"]
    assert austria.answer == answers["AUSTRIA"]
    assert austria.submitted[0] == "A BUD - SER"  # the answer's legal order, then the fills
    assert sorted(austria.submitted[1:]) == ["A VIE H", "F TRI H"]
    assert (austria.invalid, austria.missing) == (2, 2)
    assert england.answer == []
    assert sorted(england.submitted) == ["A LVP H", "F EDI H", "F LON H"]
    assert (england.invalid, england.missing) == (0, 3)
    assert france.submitted == answers["FRANCE"] and (france.invalid, france.missing) == (0, 0)
    history = env.game.get_phase_history()[-1]
    assert {p: list(o) for p, o in history.orders.items()} == {
        p: s.submitted for p, s in played.seats.items()
    }
    with pytest.raises(AttributeError):  # frozen
        austria.invalid = 0  # type: ignore[misc]


def test_powers_with_nothing_to_order_are_not_asked() -> None:
    env = DiplomacyEnv(max_years=2)
    asked: list[str] = []

    def orders_for(power: str, legal: dict[str, list[str]]) -> list[str]:
        asked.append(power)
        return first_legal(legal)

    while env.phase_type != "A":  # to the first adjustment phase
        play_phase(env, orders_for)
    owing = [p for p in POWERS if env.legal_orders(p)]
    asked.clear()
    played = play_phase(env, orders_for)
    assert asked == list(played.seats) == owing
    assert len(owing) < len(POWERS)  # someone owes nothing in W1901A of this game


def test_a_seat_refused_in_on_seat_leaves_the_phase_unresolved() -> None:
    env = DiplomacyEnv(max_years=2)

    def refuse(seat: SeatOrders) -> None:
        if seat.power == "ENGLAND":
            raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        play_phase(env, lambda _power, legal: first_legal(legal), refuse)
    assert env.phase == "S1901M"
    assert not env.game.get_orders("ENGLAND")


def hand_written_rollout(cfg: DiplomacyConfig, seating: dict[str, str]) -> list[dict]:
    """The phase loop as it was written in run_rollout before the driver, one seeded game."""
    game_seed = rollout_seed(cfg.run.seed, 0, 0)
    bots = {p: make_bot(seating[p], seat_seed(game_seed, p)) for p in POWERS}
    env = DiplomacyEnv(max_years=cfg.max_years)
    history = []
    while not env.done:
        phase_orders = {}
        history.append({"phase": env.phase, "orders": phase_orders})
        for power in POWERS:
            legal = env.legal_orders(power)
            if not legal:
                continue
            raw = list(bots[power].get_orders(env, power) or [])
            submitted, _, _ = validate_orders(env, power, raw, legal)
            env.set_orders(power, submitted)
            phase_orders[power] = submitted
        env.process()
    return history


def test_a_rollout_through_the_driver_equals_the_loop_written_out() -> None:
    cfg = DiplomacyConfig(run={"seed": 7}, max_years=3, games_dir=None)
    bots = ("greedy_bot", "chaos_bot", "random_bot", "dumb_bot")
    seating = {power: bots[i % len(bots)] for i, power in enumerate(POWERS)}
    result = run_rollout(cfg, 0, 0, seating, "ITALY")
    assert result.order_history == hand_written_rollout(cfg, seating)
    assert len(result.order_history) == result.phases
    assert [s.phase for s in result.steps] == [
        h["phase"] for h in result.order_history if "ITALY" in h["orders"]
    ]


def test_the_web_game_refuses_a_persons_orders_before_any_agent_is_asked() -> None:
    from leaguezero.web.diplomacy_games import OrderError, new_game

    game = new_game({p: "random_bot" for p in POWERS}, "FRANCE", 2, 7)
    with pytest.raises(OrderError, match="not legal for FRANCE"):
        game.locked_step(["A PAR - MOS"])
    # AUSTRIA and ENGLAND, asked before FRANCE, have no orders on the map the page draws
    assert not any(game.env.game.get_orders().values())
    assert game.env.phase == "S1901M" and not game.notes
    game.locked_step(["A PAR - BUR"])
    assert game.env.phase == "F1901M"
    assert game.notes["S1901M"] == ["Spring 1901, movement: 2 of your units without orders hold"]
