"""Static facts about a map that bots use: move distances from each location to each province.

Computed once per map by breadth-first search over the engine's own adjacency
(``Map.abuts(unit_type, loc, "-", dest)``), so coasts and army/fleet differences are the
engine's. Convoys are ignored: an army's distance is over land only.
"""

from __future__ import annotations

import functools
from collections import deque

from diplomacy.engine.map import Map

UNREACHABLE = 10**6
# {unit_type: {location: {province: moves}}}; a province is the 3-letter name (no coast).
Distances = dict[str, dict[str, dict[str, int]]]


@functools.cache
def load_map(map_name: str = "standard") -> Map:
    """The engine's map object (cached; it is read-only for our purposes)."""
    return Map(map_name)


@functools.cache
def neighbour_locations(map_name: str = "standard") -> dict[str, dict[str, tuple[str, ...]]]:
    """{unit_type: {location: locations one move away}}, coasts included (``F MAO`` reaches
    ``SPA/NC`` and ``SPA/SC``), for every location the unit type can stand on; sorted."""
    game_map = load_map(map_name)
    locations = sorted({loc.upper() for loc in game_map.locs})
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for unit_type in ("A", "F"):
        valid = [loc for loc in locations if game_map.is_valid_unit(f"{unit_type} {loc}")]
        valid_set = set(valid)
        out[unit_type] = {
            loc: tuple(
                sorted(
                    dest
                    for dest in game_map.dest_with_coasts[loc]
                    if dest in valid_set and game_map.abuts(unit_type, loc, "-", dest)
                )
            )
            for loc in valid
        }
    return out


@functools.cache
def move_distances(map_name: str = "standard") -> Distances:
    """Fewest moves from every location a unit type can stand on to every province it can reach.

    ``move_distances()["F"]["MAO"]["SPA"] == 1``; a province a unit type cannot reach is absent
    (use :func:`distance`, which returns :data:`UNREACHABLE` for it).
    """
    out: Distances = {}
    for unit_type, neighbours in neighbour_locations(map_name).items():
        per_source: dict[str, dict[str, int]] = {}
        for source in neighbours:
            seen = {source: 0}
            queue = deque([source])
            while queue:
                loc = queue.popleft()
                for dest in neighbours[loc]:
                    if dest not in seen:
                        seen[dest] = seen[loc] + 1
                        queue.append(dest)
            provinces: dict[str, int] = {}
            for loc, steps in seen.items():
                province = loc[:3]
                if steps < provinces.get(province, UNREACHABLE):
                    provinces[province] = steps
            per_source[source] = provinces
        out[unit_type] = per_source
    return out


@functools.cache
def adjacent_provinces(map_name: str = "standard") -> dict[str, dict[str, frozenset[str]]]:
    """{unit_type: {location: provinces one move away}} (the distance-1 ring)."""
    return {
        unit_type: {
            loc: frozenset(p for p, steps in provinces.items() if steps == 1)
            for loc, provinces in per_source.items()
        }
        for unit_type, per_source in move_distances(map_name).items()
    }


def distance(distances: Distances, unit_type: str, loc: str, province: str) -> int:
    """Moves for a ``unit_type`` unit at ``loc`` to reach ``province`` (UNREACHABLE if never)."""
    return distances[unit_type].get(loc, {}).get(province[:3], UNREACHABLE)


def nearest(distances: Distances, unit_type: str, loc: str, provinces: set[str]) -> int:
    """Distance from ``loc`` to the closest of ``provinces`` (UNREACHABLE if none or none left)."""
    reach = distances[unit_type].get(loc, {})
    return min((reach.get(p, UNREACHABLE) for p in provinces), default=UNREACHABLE)
