"""``dumb_bot`` on the real engine: its values, its orders, and that it plays like a baseline."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bots import is_move, make_bot, move_destination
from leaguezero.diplomacy.game.catalogue import seat_spec
from leaguezero.diplomacy.game.dumb_bot import DumbBot, power_size
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.tournament import run_tournament

DUMB, GREEDY = seat_spec("dumb_bot"), seat_spec("greedy_bot")


def test_power_size_is_the_originals_quadratic() -> None:
    assert [power_size(n) for n in (0, 3, 12)] == [16, 37, 208]


def test_neutral_centres_draw_units_in_1901() -> None:
    # At the start the twelve neutral centres count as one power of size 208 (the largest):
    # a centre next to our units is worth more than the empty land around it.
    env = DiplomacyEnv()
    values, _ = DumbBot(0)._values(env, "FRANCE")
    assert values[("A", "SPA")] > values[("A", "GAS")]
    assert values[("F", "POR")] > values[("F", "MAO")] > values[("F", "NAO")]
    # Our own unthreatened centres have no defence value; Spain (neutral) is worth more.
    assert values[("A", "SPA")] > values[("A", "PAR")]


def test_threatened_own_centre_gets_the_attackers_size() -> None:
    env = DiplomacyEnv()
    # A German army in Burgundy can move into Paris and Marseilles; Brest is out of its reach.
    env.game.set_units("GERMANY", ["A BUR", "F KIE", "A BER"], reset=True)
    env.invalidate()
    bot = DumbBot(0)
    values, competition = bot._values(env, "FRANCE")
    env_free = DiplomacyEnv()
    free_values, _ = bot._values(env_free, "FRANCE")
    assert values[("A", "PAR")] > free_values[("A", "PAR")]
    assert competition["PAR"] == 1 and competition["BRE"] == 0


def test_seeded_and_varied() -> None:
    env = DiplomacyEnv()
    a = make_bot("dumb_bot", 7).get_orders(env, "RUSSIA")
    assert a == make_bot("dumb_bot", 7).get_orders(env, "RUSSIA")
    others = {tuple(make_bot("dumb_bot", s).get_orders(env, "RUSSIA")) for s in range(30)}
    assert len(others) > 1  # near-equal choices are sometimes passed over


def _play(seating: dict[str, str], seed: int, max_years: int, watch: str) -> dict[str, int]:
    """Play a game; count what ``watch``'s dumb_bot orders and check it never self-bounces."""
    env = DiplomacyEnv(max_years=max_years)
    bots = {power: make_bot(name, seed + i) for i, (power, name) in enumerate(seating.items())}
    seen = {"support": 0, "move": 0, "retreat": 0, "build": 0, "disband": 0, "waive": 0}
    while not env.done:
        for power in POWERS:
            orders = bots[power].get_orders(env, power)
            if power == watch:
                moves = [move_destination(o)[:3] for o in orders if is_move(o)]
                assert len(moves) == len(set(moves)), f"two own units into one province: {orders}"
                staying = {o.split()[1][:3] for o in orders if o != "WAIVE" and not is_move(o)}
                assert not staying & set(moves), f"a move into an own staying unit: {orders}"
                seen["support"] += sum(" S " in o for o in orders)
                seen["move"] += len(moves)
                seen["retreat"] += sum(" R " in o for o in orders)
                seen["build"] += sum(o.endswith(" B") for o in orders)
                seen["disband"] += sum(o.endswith(" D") for o in orders)
                seen["waive"] += orders.count("WAIVE")
            env.set_orders(power, orders)
        assert not list(env.game.error), env.game.error
        env.process()
    return seen


def test_plays_every_kind_of_order_without_bouncing_itself() -> None:
    total: dict[str, int] = {}
    for seed in range(3):
        seating = {p: ("dumb_bot" if i % 2 == 0 else "greedy_bot") for i, p in enumerate(POWERS)}
        for power in ("AUSTRIA", "FRANCE", "ITALY", "TURKEY"):
            for kind, n in _play(seating, seed * 10, 8, power).items():
                total[kind] = total.get(kind, 0) + n
    assert total["move"] > 0 and total["support"] > 0 and total["build"] > 0
    assert total["retreat"] + total["disband"] > 0


def test_dumb_bot_beats_six_random_bots() -> None:
    cfg = DiplomacyConfig(run={"seed": 5}, max_years=5, games_dir=None)
    report = run_tournament(cfg, DUMB, [seat_spec("random_bot")], games=7).report()
    assert report["hero"]["win_rate"] >= 6 / 7
    # Large powers owe more builds than they have home centres: none may be counted invalid.
    assert report["invalid_orders"] == 0


def test_dumb_bot_is_stronger_than_greedy_bot() -> None:
    # Each one-against-six of the other, seats rotated: dumb_bot wins far more often.
    cfg = DiplomacyConfig(run={"seed": 9}, max_years=8, games_dir=None)
    dumb = run_tournament(cfg, DUMB, [GREEDY], games=14).report()["hero"]
    greedy = run_tournament(cfg, GREEDY, [DUMB], games=14).report()["hero"]
    assert dumb["win_rate"] > max(1 / 7, greedy["win_rate"])
    assert dumb["mean_score"] > greedy["mean_score"]
