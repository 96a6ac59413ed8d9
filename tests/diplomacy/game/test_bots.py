"""Bots on the real engine: every order legal, adjustment counts kept, seeded, as documented."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bots import BOTS, is_move, make_bot, move_destination
from leaguezero.diplomacy.game.catalogue import seat_spec
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.tournament import run_tournament


def check_orders(env: DiplomacyEnv, power: str, orders: list[str]) -> None:
    """Every order is legal for a distinct orderable location; adjustments match the count."""
    legal = env.legal_orders(power)
    used: set[str] = set()
    for order in orders:
        owners = [loc for loc, options in legal.items() if order in options]
        assert owners, f"{env.phase} {power}: illegal order {order!r}"
        if order != "WAIVE":
            assert len(owners) == 1 and owners[0] not in used, f"{order!r} orders a unit twice"
            used.add(owners[0])
    if env.phase_type == "A":
        owed = min(abs(env.adjustment_count(power)), len(legal))
        assert len(orders) <= owed
        if env.adjustment_count(power) < 0:
            assert len(orders) == owed  # disbands are never left to civil disorder
    else:
        assert len(orders) == len(legal)  # one order per unit / dislodged unit


def play_checked(seating: dict[str, str], seed: int, max_years: int) -> DiplomacyEnv:
    env = DiplomacyEnv(max_years=max_years)
    bots = {power: make_bot(name, seed + i) for i, (power, name) in enumerate(seating.items())}
    phase_types: set[str] = set()
    while not env.done:
        phase_types.add(env.phase_type)
        for power in POWERS:
            orders = bots[power].get_orders(env, power)
            check_orders(env, power, orders)
            env.set_orders(power, orders)
        errors = list(env.game.error)
        assert not errors, f"{env.phase}: engine rejected orders: {errors}"
        env.process()
    assert {"M", "A"} <= phase_types
    return env


@pytest.mark.parametrize("name", sorted(BOTS))
def test_every_order_is_legal_all_seats_one_bot(name: str) -> None:
    play_checked(dict.fromkeys(POWERS, name), seed=11, max_years=5)


def test_every_order_is_legal_mixed_seats() -> None:
    names = ["greedy_bot", "random_bot", "chaos_bot"]
    for seed in (1, 2):
        seating = {power: names[(i + seed) % 3] for i, power in enumerate(POWERS)}
        play_checked(seating, seed=seed, max_years=6)


def test_same_seed_same_orders_different_seed_differs() -> None:
    env = DiplomacyEnv()
    for name in ("random_bot", "chaos_bot"):
        a = make_bot(name, 7).get_orders(env, "RUSSIA")
        b = make_bot(name, 7).get_orders(env, "RUSSIA")
        assert a == b
        others = {tuple(make_bot(name, s).get_orders(env, "RUSSIA")) for s in range(20)}
        assert len(others) > 1


def test_chaos_bot_always_moves() -> None:
    env = DiplomacyEnv(max_years=4)
    chaos = make_bot("chaos_bot", 3)
    random_bots = {p: make_bot("random_bot", i) for i, p in enumerate(POWERS)}
    moves = 0
    while not env.done:
        for power in POWERS:
            if power == "ITALY":
                orders = chaos.get_orders(env, power)
                if env.phase_type == "M":
                    assert orders and all(is_move(o) for o in orders), orders
                    moves += len(orders)
                if env.phase_type == "A" and env.adjustment_count(power) > 0:
                    assert "WAIVE" not in orders
            else:
                orders = random_bots[power].get_orders(env, power)
            env.set_orders(power, orders)
        env.process()
    assert moves > 0


def test_greedy_takes_a_neutral_centre_in_1901() -> None:
    # Two moves from home in spring, on the centre in autumn: Russia reaches Rumania/Sweden.
    env = DiplomacyEnv(max_years=1)
    greedy = make_bot("greedy_bot", 0)
    while not env.done:
        for power in POWERS:
            if power == "RUSSIA":
                env.set_orders(power, greedy.get_orders(env, power))
        env.process()
    assert len(env.centers("RUSSIA")) >= 5


def test_greedy_beats_random_bots_in_most_games() -> None:
    cfg = DiplomacyConfig(run={"seed": 3}, max_years=6, games_dir=None)
    greedy, random_bot = seat_spec("greedy_bot"), seat_spec("random_bot")
    report = run_tournament(cfg, greedy, [random_bot], games=7).report()
    assert report["hero"]["win_rate"] >= 5 / 7
    assert report["hero"]["rating_change"] > 0


def test_unknown_bot_name() -> None:
    with pytest.raises(KeyError, match="random_bot"):
        make_bot("smart_bot")
    assert is_move("A PAR - BUR") and not is_move("A MAR S A PAR - BUR")
    assert not is_move("A LON - BEL VIA") and move_destination("F MAO - SPA/NC") == "SPA/NC"
