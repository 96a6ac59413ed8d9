"""``dumb_bot``: David Norman's DumbBot, the standard baseline of no-press Diplomacy AI.

Written here from DumbBot's published description (the DAIDE client's "how it works" notes and
its weights); the behaviour, not the code, is the original's. See ``docs/reference/dumb_bot.md``
for the algorithm in words and where this version departs from the original.

Two stages every phase:

1. **Values.** A *node* is a place a unit type can stand: ``("A", "PAR")``, ``("F", "SPA/NC")``.
   Each supply centre gets a base value — an own centre the size of the largest enemy power
   with a unit that could move into it (defence), any other centre the size of its owner
   (attack; neutral centres count as one power, sized by how many are left), where a power
   with ``n`` centres has size ``n² + 4n + 16``. ``proximity[0]`` of a node is its province's
   attack value × the attack weight + defence value × the defence weight; ``proximity[k]`` is
   ``(proximity[k-1]`` of the node + the best ``proximity[k-1]`` per neighbouring province``) / 5``,
   so value spreads over ten rings of neighbours. A node's value is the weighted sum of its
   proximities plus 1000 × our units that can reach the province (strength) minus 1000 × the
   most units any single other power can bring to it (competition); spring and fall weigh the
   rings differently (fall looks at the centres themselves).
2. **Orders.** Units in random order each take the best neighbouring node (holding counts as
   its own node, +1), passing to the next best with a chance that grows as the two values get
   closer. A unit heading for a province our own unit holds supports that unit instead when
   the province is contested (else it looks elsewhere); one heading where our other unit
   already moves supports that move when any enemy can reach it (else it looks elsewhere); a
   unit waiting on an own unit not yet ordered is deferred behind it. Units left holding then
   support a contested move or hold next to them. Retreats take the best free node (no two
   into one province); builds go to the best home-centre nodes (the node's unit type, one per
   province); disbands remove the units on the lowest-valued nodes.

Like the other bots: deterministic for a seed, only orders from ``env.legal_orders``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from leaguezero.diplomacy.game.bot_base import Bot, disband_order
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.mapinfo import adjacent_provinces, neighbour_locations

Node = tuple[str, str]  # (unit type "A"/"F", location such as "SPA/NC")

PROXIMITY_DEPTH = 10
# The original's weights ("values that seemed right at the time", never tuned).
SPRING_ATTACK, SPRING_DEFENCE = 700, 300
FALL_ATTACK, FALL_DEFENCE = 600, 400
SPRING_PROXIMITY = (100, 1000, 30, 10, 6, 5, 4, 3, 2, 1)
FALL_PROXIMITY = (1000, 100, 30, 10, 6, 5, 4, 3, 2, 1)
WINTER_PROXIMITY = (1000, 100, 30, 10, 6, 5, 4, 3, 2, 1)  # builds and removals alike
STRENGTH_WEIGHT = COMPETITION_WEIGHT = 1000  # both seasons
WINTER_DEFENCE_WEIGHT = 1000
PLAY_ALTERNATIVE = 50  # percent: chance of even considering the next-best choice
ALTERNATIVE_DIFFERENCE = 500  # how fast a wider gap to the next-best makes it less likely


def power_size(centres: int) -> int:
    """DumbBot's size of a power with ``centres`` supply centres: ``n² + 4n + 16``."""
    return centres * centres + 4 * centres + 16


class DumbBot(Bot):
    """``dumb_bot``: province values spread over the map, then greedy orders (module doc)."""

    name: ClassVar[str] = "dumb_bot"

    # ------------------------------------------------------------------ values
    def _values(self, env: DiplomacyEnv, power: str) -> tuple[dict[Node, int], dict[str, int]]:
        """``(value per node, competition per province)`` for ``power`` in the current phase."""
        # Over 80 lines: DumbBot's province values, one pass a term in the original's order, so
        # it reads against the C++ bot it reproduces (docs/reference/dumb_bot.md).
        game = env.game
        map_name = game.map_name
        graph = neighbour_locations(map_name)
        reach = adjacent_provinces(map_name)
        season = env.phase[0]
        if season == "F":
            attack_w, defence_w = FALL_ATTACK, FALL_DEFENCE
        else:  # spring moves and retreats, and winter adjustments use the spring factors
            attack_w, defence_w = SPRING_ATTACK, SPRING_DEFENCE

        owner: dict[str, str] = {}
        for name in POWERS:
            for centre in game.powers[name].centers:
                owner[centre] = name
        scs = list(game.map.scs)
        neutral = sum(1 for sc in scs if sc not in owner)
        size = {name: power_size(len(game.powers[name].centers)) for name in POWERS}

        # Units each power can bring to each province: the unit's own province and every
        # province it can move to.
        brought: dict[str, dict[str, int]] = {}
        for name in POWERS:
            for unit in game.powers[name].units:
                unit_type, loc = unit[0], unit[2:]
                for province in (loc[:3], *reach[unit_type].get(loc, ())):
                    counts = brought.setdefault(province, {})
                    counts[name] = counts.get(name, 0) + 1

        attack: dict[str, int] = {}
        defence: dict[str, int] = {}
        for sc in scs:
            holder = owner.get(sc)
            if holder == power:
                # The largest enemy that has a unit able to move into it (not one already in it).
                threats = [
                    size[name]
                    for name in POWERS
                    if name != power
                    for unit in game.powers[name].units
                    if sc in reach[unit[0]].get(unit[2:], ())
                ]
                defence[sc] = max(threats, default=0)
            else:
                attack[sc] = power_size(neutral) if holder is None else size[holder]

        # proximity[0..9] per node, each ring spread from the last.
        proximity: dict[Node, int] = {}
        for unit_type, nodes in graph.items():
            for loc in nodes:
                province = loc[:3]
                proximity[(unit_type, loc)] = (
                    attack.get(province, 0) * attack_w + defence.get(province, 0) * defence_w
                )
        rings = [proximity]
        for _ in range(1, PROXIMITY_DEPTH):
            last = rings[-1]
            ring: dict[Node, int] = {}
            for (unit_type, loc), own in last.items():
                best_per_province: dict[str, int] = {}
                for dest in graph[unit_type][loc]:
                    value = last[(unit_type, dest)]
                    province = dest[:3]
                    # Two coasts of one province (MAO: SPA/NC and SPA/SC) count once, the best.
                    if value > best_per_province.get(province, -1):
                        best_per_province[province] = value
                ring[(unit_type, loc)] = (own + sum(best_per_province.values())) // 5
            rings.append(ring)

        competition = {
            province: max((n for name, n in counts.items() if name != power), default=0)
            for province, counts in brought.items()
        }
        if env.phase_type == "A":
            weights = WINTER_PROXIMITY
        else:
            weights = FALL_PROXIMITY if season == "F" else SPRING_PROXIMITY
        values: dict[Node, int] = {}
        for node in proximity:
            province = node[1][:3]
            value = sum(w * ring[node] for w, ring in zip(weights, rings, strict=True))
            if env.phase_type == "A":
                value += WINTER_DEFENCE_WEIGHT * defence.get(province, 0)
            else:
                value += STRENGTH_WEIGHT * brought.get(province, {}).get(power, 0)
                value -= COMPETITION_WEIGHT * competition.get(province, 0)
            values[node] = value
        return values, competition

    def _pick(self, ranked: Sequence[tuple[int, object]]) -> int:
        """Index into ``ranked`` (best first): the best, or with some chance a later one.

        The chance to pass from choice ``i`` to ``i+1`` is PLAY_ALTERNATIVE % times the chance
        that a roll of 0..99 is at least ``(v_i - v_{i+1}) * 500 / v_i`` — near-equal values are
        passed over often, clearly worse ones rarely.
        """
        i = 0
        while i + 1 < len(ranked):
            best, following = ranked[i][0], ranked[i + 1][0]
            gap_chance = 0 if best == 0 else int((best - following) * ALTERNATIVE_DIFFERENCE / best)
            if self.rng.randrange(100) < PLAY_ALTERNATIVE and self.rng.randrange(100) >= gap_chance:
                i += 1
            else:
                break
        return i

    # ---------------------------------------------------------------- movement
    def movement(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        values, competition = self._values(env, power)
        graph = neighbour_locations(env.game.map_name)
        # Legal orders are keyed by province ("SPA" for F SPA/SC); the graph needs the coast.
        unit_of = {key: " ".join(options[0].split()[:2]) for key, options in legal.items()}
        by_loc = {unit[2:]: key for key, unit in unit_of.items()}
        legal = {unit[2:]: legal[key] for key, unit in unit_of.items()}
        own_loc = {loc[:3]: loc for loc in legal}  # province -> location of our unit there
        legal_sets = {loc: set(orders) for loc, orders in legal.items()}

        orders: dict[str, str] = {}  # location -> order
        moving_to: dict[str, str] = {}  # destination province -> our unit moving there
        queue = sorted(legal)
        self.rng.shuffle(queue)
        deferred: set[str] = set()
        while queue:
            loc = queue.pop(0)
            unit = unit_of[by_loc[loc]]
            unit_type = unit[0]
            candidates = [
                (values[(unit_type, dest)], dest)
                for dest in graph[unit_type][loc]
                if f"{unit} - {dest}" in legal_sets[loc]
            ]
            candidates.append((values[(unit_type, loc)] + 1, loc))
            candidates.sort(key=lambda item: (-item[0], item[1]))
            order: str | None = ""
            while not order:
                _, dest = candidates[self._pick(candidates)]
                province = dest[:3]
                if province == loc[:3]:
                    order = f"{unit} H"
                    break
                order = f"{unit} - {dest}"
                occupant_loc = own_loc.get(province)
                if occupant_loc is not None:
                    occupant_order = orders.get(occupant_loc)
                    if occupant_order is None and loc not in deferred and occupant_loc in queue:
                        # Our unit standing there has not chosen yet: wait behind it.
                        deferred.add(loc)
                        queue.insert(queue.index(occupant_loc) + 1, loc)
                        order = None
                        break
                    if occupant_order is None:
                        order = ""  # waited once already (two units eyeing each other)
                    elif not _moves(occupant_order):
                        # It stays: help it hold if the province is contested, else look on.
                        support = f"{unit} S {occupant_order.split(' S ')[0].removesuffix(' H')}"
                        contested = competition.get(province, 0) > 1
                        order = support if contested and support in legal_sets[loc] else ""
                if order and province in moving_to:
                    # Our other unit moves there: support it if anyone could contest it.
                    support = _support_move(legal[loc], moving_to[province], province)
                    order = support if competition.get(province, 0) > 0 else ""
                if order:
                    if _moves(order):
                        moving_to[province] = unit
                    break
                candidates = [c for c in candidates if c[1] != dest]
            if order is not None:
                orders[loc] = order
        self._support_wasted_holds(orders, legal_sets, graph, values, competition, moving_to)
        return [orders[loc] for loc in legal]  # the caller's location order

    @staticmethod
    def _support_wasted_holds(
        orders: dict[str, str],
        legal_sets: dict[str, set[str]],
        graph: dict[str, dict[str, tuple[str, ...]]],
        values: dict[Node, int],
        competition: dict[str, int],
        moving_to: dict[str, str],
    ) -> None:
        """A unit left holding supports the best contested own move or hold next to it."""
        staying = {loc[:3]: order for loc, order in orders.items() if not _moves(order)}
        for loc, order in list(orders.items()):
            if not order.endswith(" H"):
                continue
            unit, unit_type = order[:-2], order[0]
            best_value, best_order = 0, ""
            for dest in graph[unit_type][loc]:
                province = dest[:3]
                value = values[(unit_type, dest)]
                if value <= best_value:
                    continue
                support = ""
                if province in moving_to:
                    if competition.get(province, 0) > 0:
                        mover = moving_to[province]
                        support = _support_move(sorted(legal_sets[loc]), mover, province)
                elif province in staying and competition.get(province, 0) > 1:
                    held = staying[province].split(" S ")[0].removesuffix(" H")
                    support = f"{unit} S {held}"
                if support in legal_sets[loc]:
                    best_value, best_order = value, support
            if best_order:
                orders[loc] = best_order

    # ------------------------------------------------------------------ retreats
    def retreat(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        values, _ = self._values(env, power)
        taken: set[str] = set()
        orders = []
        locs = sorted(legal)
        self.rng.shuffle(locs)
        chosen: dict[str, str] = {}
        for loc in locs:
            options = legal[loc]
            candidates = sorted(
                (
                    (values.get((o[0], o.split(" R ")[1]), 0), o)
                    for o in options
                    if " R " in o and o.split(" R ")[1][:3] not in taken
                ),
                key=lambda item: (-item[0], item[1]),
            )
            if not candidates:
                chosen[loc] = disband_order(options)
                continue
            order = candidates[self._pick(candidates)][1]
            taken.add(order.split(" R ")[1][:3])
            chosen[loc] = order
        orders = [chosen[loc] for loc in legal]
        return orders

    # --------------------------------------------------------------- adjustments
    def builds(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        values, _ = self._values(env, power)
        candidates = sorted(
            (
                (values.get((o[0], o[2:-2]), 0), o)
                for options in legal.values()
                for o in options
                if o.endswith(" B")
            ),
            key=lambda item: (-item[0], item[1]),
        )
        orders: list[str] = []
        while candidates and len(orders) < count:
            order = candidates[self._pick(candidates)][1]
            orders.append(order)
            province = order[2:5]
            candidates = [c for c in candidates if c[1][2:5] != province]
        return orders  # builds owed beyond the free home centres are waived by not ordering them

    def disbands(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        values, _ = self._values(env, power)
        # Lowest value first: the unit we need least.
        ranked = []
        for loc, options in legal.items():
            unit_type, unit_loc = options[0].split()[:2]  # the unit's own location, with coast
            ranked.append((-values.get((unit_type, unit_loc), 0), loc))
        candidates = sorted(ranked, key=lambda item: (-item[0], item[1]))
        orders: list[str] = []
        while candidates and len(orders) < count:
            loc = candidates[self._pick(candidates)][1]
            orders.append(disband_order(legal[loc]))
            candidates = [c for c in candidates if c[1] != loc]
        return orders


def _moves(order: str) -> bool:
    """Whether an own order is a move (not a hold or a support)."""
    return " - " in order and " S " not in order


def _support_move(options: list[str], mover: str, province: str) -> str:
    """The legal order among ``options`` that supports ``mover`` into ``province`` ('' if none)."""
    prefix = f" S {mover} - "
    for order in options:
        _, sep, dest = order.partition(prefix)
        if sep and dest[:3] == province:
            return order
    return ""
