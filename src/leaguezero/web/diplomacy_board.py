"""What the Diplomacy page says about a board beyond the engine's own map: readable phase names,
the phase's results marked on the map (bounces, dislodged units), and how a game ended.

Pure functions over the engine's objects and strings; :mod:`leaguezero.web.diplomacy_games` calls
them while it holds a game's lock.
"""

from __future__ import annotations

import re
from typing import Any

SEASONS = {"S": "Spring", "F": "Fall", "W": "Winter"}
PHASE_KINDS = {"M": "movement", "R": "retreats", "A": "adjustments"}
# Result codes drawn on the map, and their colour: the legend on the page uses the same.
MARKED = {"bounce": "#d00", "dislodged": "#f80", "cut": "#a0a", "void": "#888"}


def phase_name(code: str) -> str:
    """``S1901M`` -> ``Spring 1901, movement``; ``COMPLETED`` -> ``Game over``."""
    if code == "COMPLETED":
        return "Game over"
    season, year, kind = code[:1], code[1:-1], code[-1:]
    if season in SEASONS and kind in PHASE_KINDS and year.isdigit():
        return f"{SEASONS[season]} {year}, {PHASE_KINDS[kind]}"
    return code


def order_results(phase_data: Any) -> dict[str, list[str]]:
    """``{unit: [result, ...]}`` of a played phase, the engine's codes as words (``bounce``)."""
    results = getattr(phase_data, "results", None) or {}
    return {str(unit): [str(r) for r in found] for unit, found in results.items() if found}


def orders_with_results(
    orders: dict[str, list[str]], results: dict[str, list[str]]
) -> dict[str, list[dict[str, Any]]]:
    """Each power's orders with the results of the unit that gave them (``[]``: it succeeded)."""
    out = {}
    for power, power_orders in orders.items():
        out[power] = [
            {"order": order, "results": results.get(" ".join(order.split()[:2]), [])}
            for order in power_orders
        ]
    return out


def mark_results(svg: str, renderer: Any, results: dict[str, list[str]]) -> str:
    """``svg`` with a ring around each unit whose order bounced, was cut or void, or which was
    dislodged, in the colours of :data:`MARKED`, and a ``<title>`` naming the result."""
    marks = []
    for unit, found in results.items():
        shown = [r for r in found if r in MARKED]
        if not shown:
            continue
        loc = unit.split()[-1]
        try:
            x, y = renderer._get_unit_center(loc, False)  # the engine's own unit placement
        except (KeyError, AttributeError, TypeError, ValueError):
            continue
        colour = MARKED[shown[0]]
        marks.append(
            f'<circle class="lz-result lz-{shown[0]}" cx="{x:.1f}" cy="{y:.1f}" r="19" '
            f'fill="none" stroke="{colour}" stroke-width="4" stroke-dasharray="6 3">'
            f"<title>{unit}: {', '.join(shown)}</title></circle>"
        )
    if not marks:
        return svg
    end = svg.rfind("</svg>")
    return svg[:end] + '<g id="lz-results">' + "".join(marks) + "</g>" + svg[end:]


def label_phase(svg: str, label: str) -> str:
    """``svg`` with the phase the engine writes at the map's bottom right replaced by
    ``label``."""
    return re.sub(r'(<text[^>]*id="CurrentPhase"[^>]*>)[^<]*(</text>)', rf"\g<1>{label}\g<2>", svg)


def leaders(game: Any) -> tuple[list[str], int]:
    """The powers with the most supply centres, and that number."""
    counts = {name: len(power.centers) for name, power in game.powers.items()}
    most = max(counts.values())
    return sorted(p for p, n in counts.items() if n == most), most


def outcome(game: Any, done: bool, last_year: int | None) -> str | None:
    """How the game ended, in words (None while it goes on): a solo, or stopped at the year cap
    with who leads. The engine calls a stop at the cap a victory of every power left."""
    if not done:
        return None
    winners = [str(w) for w in (getattr(game, "outcome", None) or [])[1:]]
    if len(winners) == 1:
        return f"{winners[0]} wins with a solo"
    powers, centres = leaders(game)
    cap = f" after {last_year}" if last_year is not None else ""
    verb = "leads" if len(powers) == 1 else "lead"
    return f"Stopped at the year cap{cap}: {' and '.join(powers)} {verb} with {centres} centres"
