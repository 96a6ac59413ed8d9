"""The phase as a prompt, and a completion parsed back into legal orders.

The prompt lists the board (every power's units and centres), the asking power's own units
and centres, and the legal orders of each orderable location, compactly: the unit is written
once per location and each option without it (``A PAR: H | - BUR | S A MAR - BUR``), which
roughly halves the prompt of a movement phase. The model answers one order per line and
``END``.

:func:`extract_orders` is tolerant: bullets, numbering, case, spacing (``A PAR-BUR`` and
``a par  -  bur``), arrows (``->``), ``HOLD``/``HOLDS`` and several orders on one line split by
``;`` or ``,`` all parse. Anything else is counted invalid, a second order for a location is
counted invalid, and an orderable location left without an order is counted missing and
filled (a hold in a movement phase, a disband in a retreat phase; in an adjustment phase the
engine waives missing builds), exactly as the rollout's own validation does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leaguezero.diplomacy.env import DiplomacyEnv

PROMPT_VERSION = "dip_orders_v1"  # bump when the prompt's layout changes (adapters depend on it)
END_MARK = "END"
PHASE_NAMES = {"M": "movement", "R": "retreats", "A": "adjustments"}
WAIVE = "WAIVE"

# Leading list markers: "-", "*", "•", "1.", "1)", "(1)", "a." ... (greedy spaces after them).
_BULLET = re.compile(r"^\s*(?:[-*•·]+|\(?\d{1,3}[.):]|\(?[a-zA-Z][.)])\s+")
_ARROW = re.compile(r"\s*(?:->|=>|→|–|—|-)\s*")
_SPACES = re.compile(r"\s+")
_WORDS = {"HOLD": "H", "HOLDS": "H", "SUPPORT": "S", "SUPPORTS": "S", "CONVOY": "C",
          "CONVOYS": "C", "RETREAT": "R", "DISBAND": "D", "BUILD": "B"}  # fmt: skip


def canonical_order(text: str) -> str:
    """A spelling-insensitive key of one order: upper case, single spaces, ``X - Y`` dashes,
    long words for the order letters (``HOLDS`` -> ``H``) and a trailing full stop dropped."""
    text = text.strip().rstrip(".").upper()
    text = _ARROW.sub(" - ", text)
    words = [_WORDS.get(w, w) for w in _SPACES.split(text.strip()) if w]
    return " ".join(words)


def _compact_options(loc: str, options: Sequence[str]) -> str:
    """``A PAR: H | - BUR | S A MAR - BUR``: the unit once, then each option without it."""
    unit = ""
    parts: list[str] = []
    for option in options:
        tokens = option.split()
        # Unit orders start with the unit ("A PAR ..."); builds ("A PAR B") too; WAIVE does not.
        if len(tokens) >= 3 and tokens[0] in ("A", "F"):
            head = " ".join(tokens[:2])
            if not unit:
                unit = head
            if head == unit:
                parts.append(" ".join(tokens[2:]))
                continue
        parts.append(option)
    label = unit or loc
    return f"{label}: " + " | ".join(parts)


def build_prompt(env: DiplomacyEnv, power: str, legal: Mapping[str, Sequence[str]]) -> str:
    """The prompt for ``power`` in ``env``'s current phase.

    ``legal``: ``{orderable location: legal orders}`` (``env.legal_orders(power)``). The text
    ends with ``ORDERS:`` and a newline, where the completion starts.
    """
    game = env.game
    phase_type = env.phase_type
    lines = [
        f"Diplomacy, no press. Phase {env.phase} ({PHASE_NAMES.get(phase_type, phase_type)}).",
        f"You are {power}.",
        "Board (power: units | centres):",
    ]
    for name, state in sorted(game.powers.items()):
        units = ", ".join(sorted(state.units)) or "-"
        centres = " ".join(sorted(state.centers)) or "-"
        lines.append(f"{name}: {units} | {centres}")
    own = game.powers[power]
    lines.append(f"Your units: {', '.join(sorted(own.units)) or '-'}")
    lines.append(f"Your centres: {' '.join(sorted(own.centers)) or '-'}")
    if phase_type == "A":
        owed = env.adjustment_count(power)
        what = f"build {owed}" if owed > 0 else f"disband {-owed}"
        lines.append(f"Adjustments: {what}.")
    lines.append("Legal orders per location:")
    lines.extend(_compact_options(loc, legal[loc]) for loc in sorted(legal))
    lines.append(f"Write one full order per line (e.g. A PAR - BUR), then {END_MARK}.")
    lines.append("ORDERS:")
    return "\n".join(lines) + "\n"


@dataclass
class ExtractedOrders:
    """Orders parsed from a completion.

    ``orders``: legal orders to submit, one per location at most, fills included;
    ``parsed``: the legal orders the completion itself gave; ``invalid``: order-like pieces that
    were not legal or ordered a location twice; ``missing``: orderable locations the completion
    left without an order (filled in ``orders`` where a fill exists).
    """

    orders: list[str]
    parsed: list[str] = field(default_factory=list)
    invalid: int = 0
    missing: int = 0


def _pieces(text: str) -> list[str]:
    """Order-like pieces of a completion, stopping at the ``END`` mark."""
    pieces: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.upper().rstrip(".") == END_MARK:
            break
        if not line:
            continue
        line = _BULLET.sub("", line)
        # "FRANCE: A PAR - BUR" or "Orders: ..." — orders never contain a colon.
        if ":" in line:
            line = line.rsplit(":", 1)[1]
        pieces.extend(p.strip() for p in re.split(r"[;,]", line) if p.strip())
    return pieces


def extract_orders(
    text: str,
    legal_orders_by_location: Mapping[str, Sequence[str]],
    phase_type: str = "M",
    max_orders: int | None = None,
) -> ExtractedOrders:
    """Parse ``text`` into legal orders for the locations of ``legal_orders_by_location``.

    ``phase_type``: ``M``, ``R`` or ``A`` (decides the fill of a missing location: hold,
    disband, nothing); ``max_orders``: in an adjustment phase, the builds or disbands owed
    (further ones are invalid). Never raises on model output.
    """
    by_key: dict[str, tuple[str, str]] = {}  # canonical order -> (legal order, location)
    for loc, options in legal_orders_by_location.items():
        for option in options:
            if option != WAIVE:
                by_key.setdefault(canonical_order(option), (option, loc))
    result = ExtractedOrders(orders=[])
    ordered: set[str] = set()
    for piece in _pieces(text):
        key = canonical_order(piece)
        quota_full = max_orders is not None and len(result.parsed) >= max_orders
        if key == WAIVE and phase_type == "A" and not quota_full:
            result.parsed.append(WAIVE)
            continue
        hit = by_key.get(key)
        if hit is None or hit[1] in ordered or quota_full:
            result.invalid += 1
            continue
        ordered.add(hit[1])
        result.parsed.append(hit[0])
    result.orders = list(result.parsed)
    if phase_type == "A":
        owed = max_orders if max_orders is not None else len(legal_orders_by_location)
        result.missing = max(0, min(owed, len(legal_orders_by_location)) - len(result.parsed))
        return result
    suffix = " H" if phase_type == "M" else " D"
    for loc, options in legal_orders_by_location.items():
        if loc in ordered:
            continue
        result.missing += 1
        fill = next((o for o in options if o.endswith(suffix)), None)
        if fill is not None:
            result.orders.append(fill)
    return result
