"""Baseline bots; their names (``random_bot``, ``chaos_bot``, ``greedy_bot``, ``dumb_bot``) are
contracts.

The base class (:mod:`.bot_base`) and ``dumb_bot`` (:mod:`.dumb_bot`) have modules of their own.
Every bot takes a seed, uses only its own ``random.Random``, and returns only orders from
``env.legal_orders(power)``. In adjustment phases every bot gives exactly the number of builds
or disbands the power owes (the engine lists a build order at every free home centre, so "one
random order per location" would over-build):

- ``random_bot``: a uniformly random legal order for every orderable location (moves, holds,
  supports, convoys, retreats, disbands alike). Builds: a random subset of the free home
  centres of the size owed, each a random legal choice (which may be ``WAIVE``); disbands:
  random units.
- ``chaos_bot``: random but always on the move: every unit moves (never holds, supports or
  convoys; no convoyed ``VIA`` moves), choosing uniformly among moves that attack (into a
  province held by another power's unit, or a centre it does not own) when there are any, else
  among all moves. Retreats whenever it can (never disbands by choice); builds every unit it
  may, never waives; disbands random units.
- ``greedy_bot``: heads for supply centres it does not own and defends its own. A unit on a
  centre it does not own holds (so it captures it in the autumn); a unit on an own centre that
  an enemy unit could enter holds; the others move to the free destination nearest (by move
  distance) to an unowned centre, without two of its units entering one province; idle units
  support its attacks on occupied provinces. Retreats towards unowned centres; builds at the
  sites nearest to unowned centres (army or fleet, whichever is nearer); disbands the units
  farthest from them.
"""

from __future__ import annotations

from typing import ClassVar

from leaguezero.diplomacy.game.bot_base import WAIVE, Bot, disband_order, is_move, move_destination
from leaguezero.diplomacy.game.catalogue import BOT_TABLE
from leaguezero.diplomacy.game.dumb_bot import DumbBot  # noqa: F401 (BOTS finds it by name)
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.mapinfo import adjacent_provinces, move_distances, nearest


class RandomBot(Bot):
    """``random_bot``: a uniformly random legal order per orderable location."""

    name: ClassVar[str] = "random_bot"


class ChaosBot(Bot):
    """``chaos_bot``: always moving/attacking, never holding or supporting (see module doc)."""

    name: ClassVar[str] = "chaos_bot"

    def movement(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        foreign_units = {
            unit[2:5]
            for name, state in env.game.powers.items()
            if name != power
            for unit in state.units
        }
        unowned = set(env.game.map.scs) - set(env.game.powers[power].centers)
        attackable = foreign_units | unowned
        orders = []
        for options in legal.values():
            moves = [o for o in options if is_move(o)]
            if not moves:
                orders.append(next((o for o in options if o.endswith(" H")), options[0]))
                continue
            attacks = [o for o in moves if move_destination(o)[:3] in attackable]
            orders.append(self.rng.choice(attacks or moves))
        return orders

    def retreat(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        orders = []
        for options in legal.values():
            retreats = [o for o in options if " R " in o]
            orders.append(self.rng.choice(retreats) if retreats else disband_order(options))
        return orders

    def builds(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        sites = [loc for loc, orders in legal.items() if any(o != WAIVE for o in orders)]
        chosen = self.rng.sample(sites, min(count, len(sites)))
        return [self.rng.choice([o for o in legal[loc] if o != WAIVE]) for loc in chosen]


class GreedyBot(Bot):
    """``greedy_bot``: takes unowned supply centres, defends its own (see module doc)."""

    name: ClassVar[str] = "greedy_bot"

    def movement(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        game = env.game
        dist = move_distances(game.map_name)
        own_centers = set(game.powers[power].centers)
        targets = set(game.map.scs) - own_centers
        occupant: dict[str, str] = {}  # province -> power of the unit there
        enemy_units: list[str] = []
        for name, state in game.powers.items():
            for unit in state.units:
                occupant[unit[2:5]] = name
                if name != power:
                    enemy_units.append(unit)

        adjacent = adjacent_provinces(game.map_name)
        # Provinces some enemy unit could enter this phase.
        enemy_reach = set().union(*(adjacent[u[0]].get(u[2:], ()) for u in enemy_units))

        def threatened(province: str) -> bool:
            return province in enemy_reach

        memo: dict[tuple[str, str], int] = {}

        def to_target(unit_type: str, loc: str) -> int:
            # Many moves of one power share destinations; each distance is computed once.
            key = (unit_type, loc)
            if key not in memo:
                memo[key] = nearest(dist, unit_type, loc, targets)
            return memo[key]

        orders: dict[str, str] = {}
        busy: set[str] = set()  # units holding to capture or defend a centre
        plans: list[tuple[float, str, str, str]] = []  # (value, loc, order, dest province)
        for loc, options in legal.items():
            unit_type, province = options[0][0], loc[:3]
            hold = next((o for o in options if o.endswith(" H")), options[0])
            if province in targets or (province in own_centers and threatened(province)):
                orders[loc] = hold  # capture it this autumn / keep it
                busy.add(loc)
                continue
            here = to_target(unit_type, loc)
            best = (-10.0 * here - 5.0, hold, province)  # holding is worse than closing in
            for order in options:
                if not is_move(order):
                    continue
                dest = move_destination(order)
                if dest[:3] in targets:
                    # Empty centres first; an occupied one may bounce but is still worth a try.
                    value = 100.0 - (30.0 if dest[:3] in occupant else 0.0)
                else:
                    value = -10.0 * to_target(unit_type, dest)
                value += self.rng.random()  # tie-break, seeded
                if value > best[0]:
                    best = (value, order, dest[:3])
            plans.append((best[0], loc, best[1], best[2]))

        # Best plans claim their destination first; a unit whose destination is taken (or is a
        # province where our own unit stays) falls back to its next-best move or holds.
        claimed = {loc[:3] for loc in orders}
        for _, loc, order, dest in sorted(plans, reverse=True):
            if is_move(order) and dest not in claimed:
                orders[loc] = order
                claimed.add(dest)
                continue
            orders[loc] = self._fallback(legal[loc], claimed, targets, dist)
            if is_move(orders[loc]):
                claimed.add(move_destination(orders[loc])[:3])
            else:
                claimed.add(loc[:3])
        self._add_supports(orders, legal, occupant, power, busy)
        return [orders[loc] for loc in legal]

    def _fallback(self, options, claimed, targets, dist) -> str:
        moves = [o for o in options if is_move(o) and move_destination(o)[:3] not in claimed]
        if moves:
            unit_type = options[0][0]
            return min(
                moves,
                key=lambda o: (nearest(dist, unit_type, move_destination(o), targets), o),
            )
        return next((o for o in options if o.endswith(" H")), options[0])

    @staticmethod
    def _add_supports(
        orders: dict[str, str],
        legal: dict[str, list[str]],
        occupant: dict[str, str],
        power: str,
        busy: set[str],
    ) -> None:
        # Attacks into provinces held by another power need help to dislodge; a unit with
        # nothing better to do (holding on a province it neither captures nor defends) helps.
        attacks = {
            order: move_destination(order)
            for order in orders.values()
            if is_move(order) and occupant.get(move_destination(order)[:3], power) != power
        }
        for loc, order in list(orders.items()):
            if is_move(order) or loc in busy or not attacks:
                continue
            for attack in attacks:
                support = f"{order[:-2]} S {attack}"
                if support in legal[loc]:
                    orders[loc] = support
                    break

    def retreat(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        dist = move_distances(env.game.map_name)
        targets = set(env.game.map.scs) - set(env.game.powers[power].centers)
        orders = []
        for options in legal.values():
            unit_type = options[0][0]
            retreats = [o for o in options if " R " in o]
            if not retreats:
                orders.append(disband_order(options))
                continue
            orders.append(
                min(
                    retreats,
                    key=lambda o: (nearest(dist, unit_type, o.split(" R ")[1], targets), o),
                )
            )
        return orders

    def builds(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        dist = move_distances(env.game.map_name)
        targets = set(env.game.map.scs) - set(env.game.powers[power].centers)
        choices = []  # (distance, order) per site: its best unit type
        for options in legal.values():
            builds = [o for o in options if o.endswith(" B")]
            if builds:
                choices.append(
                    min((nearest(dist, o[0], o[2:-2], targets), o[0] != "A", o) for o in builds)
                )
        choices.sort()
        return [order for _, _, order in choices[:count]]

    def disbands(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        dist = move_distances(env.game.map_name)
        targets = set(env.game.map.scs) - set(env.game.powers[power].centers)
        ranked = sorted(
            legal.items(),
            key=lambda item: (-nearest(dist, item[1][0][0], item[0], targets), item[0]),
        )
        return [disband_order(options) for _, options in ranked[:count]]


# Every bot's class by its contract name, in the catalogue's order: BOT_TABLE names each class.
BOTS: dict[str, type[Bot]] = {entry.name: globals()[entry.class_name] for entry in BOT_TABLE}


def make_bot(name: str, seed: int | None = None) -> Bot:
    """A fresh bot by its contract name; raises ``KeyError`` naming the bots for another name."""
    try:
        return BOTS[name](seed)
    except KeyError:
        raise KeyError(f"no bot named {name!r}; bots are {', '.join(BOTS)}") from None
