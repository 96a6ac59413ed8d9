"""Board and order features for the small Diplomacy policy network.

**Board** (:func:`board_features`): one row per map location (82 on the standard map: the 75
provinces plus the six coasts ``BUL/EC`` ... ``STP/SC``), ``[L, NUM_FEATURES]`` float32, seen
from the power to play. Province facts (unit, centre) are copied to every location of the
province, so a coast row knows its province's unit and centre; the network tells coasts apart
by a learned location embedding. Columns (``FEATURE_NAMES``):

- unit here: army / fleet, mine / another power's, owner one-hot (7);
- dislodged unit here (retreat phases): mine / another power's;
- supply centre: is one, owner is me / another power / nobody, owner one-hot (7), my home centre;
- global, the same on every row: power to play one-hot (7), season (spring/fall/winter), phase
  type (movement/retreat/adjustment), years played / 10, my centres / 18, my units / 18,
  builds (+) or disbands (-) owed / 5.

**Orders** (:func:`encode_order`): an engine order string becomes ``(type, src, dst, aux)``
location indices (``NONE_LOC`` where absent): a move ``A PAR - BUR`` is ``(MOVE, PAR, BUR,
NONE)``; a support ``A MAR S A PAR - BUR`` is ``(SUPPORT_MOVE, MAR, BUR, PAR)``; a convoy
``F ENG C A LON - BRE`` is ``(CONVOY, ENG, BRE, LON)``; ``WAIVE`` is ``(WAIVE, NONE, NONE,
NONE)``. The network scores an order from the board embeddings at those locations.

``FEATURE_SCHEMA_ID`` names this layout; checkpoints store it and refuse another.
"""

from __future__ import annotations

import functools

import numpy as np

from leaguezero.diplomacy.game.env import POWERS, START_YEAR, DiplomacyEnv
from leaguezero.diplomacy.game.mapinfo import load_map

FEATURE_SCHEMA_ID = "diplomacy_board_v1"
MAP_NAME = "standard"

ORDER_TYPES: tuple[str, ...] = (
    "HOLD",
    "MOVE",
    "MOVE_VIA",
    "SUPPORT_HOLD",
    "SUPPORT_MOVE",
    "CONVOY",
    "RETREAT",
    "DISBAND",
    "BUILD_ARMY",
    "BUILD_FLEET",
    "WAIVE",
)
ORDER_TYPE_INDEX = {name: i for i, name in enumerate(ORDER_TYPES)}

FEATURE_NAMES: tuple[str, ...] = (
    "unit_army",
    "unit_fleet",
    "unit_mine",
    "unit_other",
    *(f"unit_owner_{p}" for p in POWERS),
    "dislodged_mine",
    "dislodged_other",
    "is_center",
    "center_mine",
    "center_other",
    "center_unowned",
    *(f"center_owner_{p}" for p in POWERS),
    "home_center_mine",
    *(f"to_play_{p}" for p in POWERS),
    "season_spring",
    "season_fall",
    "season_winter",
    "phase_movement",
    "phase_retreat",
    "phase_adjustment",
    "years_played",
    "my_centers",
    "my_units",
    "adjustment_owed",
)
NUM_FEATURES = len(FEATURE_NAMES)
_F = {name: i for i, name in enumerate(FEATURE_NAMES)}


@functools.cache
def locations(map_name: str = MAP_NAME) -> tuple[str, ...]:
    """The map's locations, upper case and sorted (the row order of :func:`board_features`)."""
    return tuple(sorted({loc.upper() for loc in load_map(map_name).locs}))


@functools.cache
def location_index(map_name: str = MAP_NAME) -> dict[str, int]:
    """{location: row}; ``NONE_LOC`` (= number of locations) is the padding index."""
    return {loc: i for i, loc in enumerate(locations(map_name))}


NONE_LOC = len(locations())


@functools.cache
def province_rows(map_name: str = MAP_NAME) -> dict[str, tuple[int, ...]]:
    """{province (3 letters): rows of all its locations} (``STP`` -> STP, STP/NC, STP/SC)."""
    rows: dict[str, list[int]] = {}
    for i, loc in enumerate(locations(map_name)):
        rows.setdefault(loc[:3], []).append(i)
    return {p: tuple(r) for p, r in rows.items()}


@functools.cache
def adjacency(map_name: str = MAP_NAME) -> np.ndarray:
    """``[L, L]`` float32 row-normalised adjacency (either unit type can move between the two
    locations), the neighbour mean of the graph layers."""
    game_map = load_map(map_name)
    index = location_index(map_name)
    adj = np.zeros((len(index), len(index)), dtype=np.float32)
    for loc, neighbours in game_map.loc_abut.items():
        i = index.get(loc.upper())
        if i is None:
            continue
        for other in neighbours:
            j = index.get(other.upper())
            if j is not None:
                adj[i, j] = adj[j, i] = 1.0
    return adj / np.maximum(adj.sum(axis=1, keepdims=True), 1.0)


def board_features(env: DiplomacyEnv, power: str) -> np.ndarray:
    """``[L, NUM_FEATURES]`` float32 features of the current phase as ``power`` sees it."""
    game = env.game
    rows = province_rows(MAP_NAME)
    x = np.zeros((len(locations(MAP_NAME)), NUM_FEATURES), dtype=np.float32)
    for owner_index, owner in enumerate(POWERS):
        state = game.powers[owner]
        mine = owner == power
        for unit in state.units:
            r = rows[unit[2:5]]
            x[r, _F["unit_army"] if unit[0] == "A" else _F["unit_fleet"]] = 1.0
            x[r, _F["unit_mine"] if mine else _F["unit_other"]] = 1.0
            x[r, _F["unit_owner_AUSTRIA"] + owner_index] = 1.0
        for unit in state.retreats:
            x[rows[unit[2:5]], _F["dislodged_mine"] if mine else _F["dislodged_other"]] = 1.0
        for center in state.centers:
            r = rows[center[:3]]
            x[r, _F["center_mine"] if mine else _F["center_other"]] = 1.0
            x[r, _F["center_owner_AUSTRIA"] + owner_index] = 1.0
    for center in game.map.scs:
        r = rows[center[:3]]
        x[r, _F["is_center"]] = 1.0
        if x[r[0], _F["center_mine"]] == 0 and x[r[0], _F["center_other"]] == 0:
            x[r, _F["center_unowned"]] = 1.0
    for home in game.powers[power].homes:
        x[rows[home[:3]], _F["home_center_mine"]] = 1.0

    me = game.powers[power]
    x[:, _F["to_play_AUSTRIA"] + POWERS.index(power)] = 1.0
    phase = env.phase
    if phase[:1] in "SFW":
        x[:, _F[{"S": "season_spring", "F": "season_fall", "W": "season_winter"}[phase[0]]]] = 1.0
    kind = env.phase_type
    if kind in ("M", "R", "A"):
        name = {"M": "phase_movement", "R": "phase_retreat", "A": "phase_adjustment"}[kind]
        x[:, _F[name]] = 1.0
    x[:, _F["years_played"]] = ((env.year or START_YEAR) - START_YEAR) / 10.0
    x[:, _F["my_centers"]] = len(me.centers) / 18.0
    x[:, _F["my_units"]] = len(me.units) / 18.0
    x[:, _F["adjustment_owed"]] = env.adjustment_count(power) / 5.0
    return x


def encode_order(order: str, map_name: str = MAP_NAME) -> tuple[int, int, int, int]:
    """``(type, src, dst, aux)`` indices of an engine order string (module doc).

    Raises ``ValueError`` for an order this encoder does not know (a new engine syntax).
    """
    index = location_index(map_name)
    if order == "WAIVE":
        return ORDER_TYPE_INDEX["WAIVE"], NONE_LOC, NONE_LOC, NONE_LOC
    parts = order.split()
    try:
        src = index[parts[1]]
        verb = parts[2]
        if verb == "H":
            return ORDER_TYPE_INDEX["HOLD"], src, NONE_LOC, NONE_LOC
        if verb == "-":
            kind = "MOVE_VIA" if parts[-1] == "VIA" else "MOVE"
            return ORDER_TYPE_INDEX[kind], src, index[parts[3]], NONE_LOC
        if verb in ("S", "C"):
            aux = index[parts[4]]
            if len(parts) > 5 and parts[5] == "-":
                kind = "CONVOY" if verb == "C" else "SUPPORT_MOVE"
                return ORDER_TYPE_INDEX[kind], src, index[parts[6]], aux
            return ORDER_TYPE_INDEX["SUPPORT_HOLD"], src, aux, aux
        if verb == "R":
            return ORDER_TYPE_INDEX["RETREAT"], src, index[parts[3]], NONE_LOC
        if verb == "D":
            return ORDER_TYPE_INDEX["DISBAND"], src, NONE_LOC, NONE_LOC
        if verb == "B":
            kind = "BUILD_ARMY" if parts[0] == "A" else "BUILD_FLEET"
            return ORDER_TYPE_INDEX[kind], src, NONE_LOC, NONE_LOC
    except (IndexError, KeyError):
        pass
    raise ValueError(f"cannot encode order {order!r}; the feature encoder knows {ORDER_TYPES}")


def encode_orders(orders: list[str]) -> np.ndarray:
    """``[K, 4]`` int64 rows of :func:`encode_order` for a list of candidate orders."""
    return np.array([encode_order(o) for o in orders], dtype=np.int64).reshape(len(orders), 4)
