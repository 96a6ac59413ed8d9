"""A thin wrapper over the ``diplomacy`` engine for no-press games with a year cap.

:class:`DiplomacyEnv` owns one ``diplomacy.Game`` and adds what the league needs: legal orders
computed once per phase and shared by all seven seats (the engine recomputes them for the whole
board on every call, which is the single most expensive thing a bot does), a max-year cap (random
play almost never ends a game), cheap state copies (``set_state(get_state())`` is ~2 ms where
``copy.deepcopy`` is ~0.8 s), and saving/loading in the engine's saved-game JSON so a game can
be replayed with the package's own tools.

Orders are the engine's strings (``"A PAR - BUR"``, ``"F BRE S A PAR - PIC"``, ``"A MUN R KIE"``,
``"A PAR B"``, ``"WAIVE"``). Phases are short names: ``S1901M``, ``F1901R``, ``W1901A``, and
``COMPLETED`` once the game is over.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

try:
    from diplomacy import Game
    from diplomacy.utils.export import from_saved_game_format, to_saved_game_format
except ImportError as _err:  # pragma: no cover - depends on the optional extra
    raise ImportError(
        "leaguezero.diplomacy needs the 'diplomacy' engine (AGPL-3.0): "
        "pip install 'leaguezero[diplomacy]'"
    ) from _err

from leaguezero.common.atomic import atomic_write_json

POWERS: tuple[str, ...] = ("AUSTRIA", "ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA", "TURKEY")
START_YEAR = 1901
MAP_NAME = "standard"
# The engine's defaults already include NO_PRESS; we name it so a saved game says so even if
# the engine's defaults change.
NO_PRESS_RULES: tuple[str, ...] = ("NO_PRESS", "IGNORE_ERRORS", "POWER_CHOICE")
SAVED_GAME_SCHEMA_VERSION = 1
COMPLETED = "COMPLETED"


class SavedGameError(ValueError):
    """A saved game that cannot be loaded (missing file, not JSON, wrong schema version)."""


def phase_year(phase: str) -> int | None:
    """The year of a short phase name (``S1903M`` -> 1903); None for ``COMPLETED``."""
    if len(phase) >= 6 and phase[1:5].isdigit():
        return int(phase[1:5])
    return None


class DiplomacyEnv:
    """One no-press game on the standard map, ended after ``max_years`` game years.

    ``max_years`` years means the game plays 1901 .. 1900+max_years (each with its retreat and
    adjustment phases) and is then stopped with the engine's ``draw()``, so the saved game is
    marked completed; a solo (18 centres) ends it earlier. ``None`` plays until the engine ends it.
    """

    def __init__(self, max_years: int | None = 10, game: Game | None = None) -> None:
        if max_years is not None and max_years < 1:
            raise ValueError(f"max_years must be at least 1 (or None), got {max_years}")
        self.max_years = max_years
        # The rollout's game seed (run_rollout sets it): per-game state elsewhere (an LLM
        # table's sampling seed) follows from the game, not from the order games ask.
        self.seed: int | None = None
        self.game: Game = game if game is not None else Game(map_name=MAP_NAME)
        for rule in NO_PRESS_RULES:
            if rule not in self.game.rules:
                self.game.add_rule(rule)
        self.ended_by_cap = False
        self.phases_processed = 0
        self._cache_key: tuple[str, int] | None = None
        self._possible: dict[str, list[str]] = {}
        self._orderable: dict[str, list[str]] = {}
        self._legal: dict[str, dict[str, list[str]]] = {}  # power -> sorted legal orders

    # ----------------------------------------------------------------- phase info
    @property
    def phase(self) -> str:
        """Short name of the current phase (``S1901M`` ... or ``COMPLETED``)."""
        return self.game.get_current_phase()

    @property
    def phase_type(self) -> str:
        """``M`` (movement), ``R`` (retreats), ``A`` (adjustments) or ``-`` when over."""
        return self.game.phase_type if not self.done else "-"

    @property
    def year(self) -> int | None:
        """The current game year, None once the game is over."""
        return phase_year(self.phase)

    @property
    def last_year(self) -> int | None:
        """The last year played before the cap stops the game (None without a cap)."""
        return None if self.max_years is None else START_YEAR + self.max_years - 1

    @property
    def done(self) -> bool:
        """Whether the game is over (a solo, the year cap, or any other engine ending)."""
        return bool(self.game.is_game_done)

    def centers(self, power: str) -> list[str]:
        """Supply centres owned by ``power``."""
        return list(self.game.powers[power].centers)

    def units(self, power: str) -> list[str]:
        """Units of ``power`` (``"A PAR"``, ``"F STP/SC"``)."""
        return list(self.game.powers[power].units)

    # -------------------------------------------------------------- legal orders
    def _refresh(self) -> None:
        # The engine has no cheap "state changed" signal; the phase name plus our own process
        # counter identify a position within this env (set_state resets the counter).
        key = (self.phase, self.phases_processed)
        if key == self._cache_key:
            return
        self._cache_key = key
        self._orderable = self.game.get_orderable_locations()
        self._possible = self.game.get_all_possible_orders()
        self._legal = {}

    def invalidate(self) -> None:
        """Forget the cached legal orders; call it after editing ``self.game`` directly."""
        self._cache_key = None

    def orderable_locations(self, power: str) -> list[str]:
        """Locations where ``power`` must give an order this phase (units, retreats, builds)."""
        self._refresh()
        return list(self._orderable.get(power, ()))

    def legal_orders(self, power: str) -> dict[str, list[str]]:
        """``{location: sorted legal orders}`` for each orderable location of ``power``.

        Sorted so that a seeded bot makes the same choice in every process (the engine builds
        these from sets, whose order depends on the interpreter's hash seed). Computed once per
        phase for the whole board and shared by all powers.
        """
        self._refresh()
        legal = self._legal.get(power)
        if legal is None:
            legal = {
                loc: sorted(self._possible.get(loc, ())) for loc in self._orderable.get(power, ())
            }
            self._legal[power] = legal
        # Callers get their own dict and lists: a policy may mutate what it is handed.
        return {loc: list(orders) for loc, orders in legal.items()}

    def adjustment_count(self, power: str) -> int:
        """Builds (> 0) or disbands (< 0) ``power`` owes in an adjustment phase; 0 otherwise."""
        if self.phase_type != "A":
            return 0
        state = self.game.powers[power]
        return len(state.centers) - len(state.units)

    # ------------------------------------------------------------- orders, process
    def set_orders(self, power: str, orders: list[str]) -> None:
        """Submit ``power``'s orders, which must be legal strings from :meth:`legal_orders`.

        The engine's order expansion is skipped (``expand=False``, about half the cost of
        setting orders) because legal orders are already in its canonical form; the rollout
        validates agent orders against :meth:`legal_orders` before they get here.
        """
        self.game.set_orders(power, orders, expand=False)

    def process(self) -> None:
        """Resolve the current phase; stop the game as a draw once the year cap is passed."""
        if self.done:
            raise RuntimeError("the game is over; no more phases to process")
        self.game.process()
        self.phases_processed += 1
        year, last_year = self.year, self.last_year
        if not self.done and last_year is not None and year is not None and year > last_year:
            # draw() marks the game completed with every power that still has units as a
            # co-winner; our scores are computed separately from centres and units.
            self.game.draw()
            self.ended_by_cap = True

    # ------------------------------------------------------------------ copies
    def copy(self) -> DiplomacyEnv:
        """An independent copy of the current position (no history), via get/set_state."""
        game = Game(map_name=self.game.map_name, rules=list(self.game.rules))
        game.set_state(self.game.get_state())
        clone = DiplomacyEnv(max_years=self.max_years, game=game)
        clone.ended_by_cap = self.ended_by_cap
        return clone

    # ------------------------------------------------------------ observation
    def observation(self, power: str) -> dict[str, Any]:
        """A JSON-able view of the board for ``power``: phase, everyone's units and centres."""
        powers = self.game.powers
        return {
            "phase": self.phase,
            "power": power,
            "units": {name: list(p.units) for name, p in powers.items()},
            "centers": {name: list(p.centers) for name, p in powers.items()},
            "retreats": {unit: list(dests) for unit, dests in powers[power].retreats.items()},
            "adjustment_count": self.adjustment_count(power),
        }

    # ------------------------------------------------------------ save / load
    def to_saved_game(self, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The engine's saved-game dict plus a ``leaguezero`` block (schema version, metadata)."""
        saved = to_saved_game_format(self.game)
        saved["leaguezero"] = {
            "schema_version": SAVED_GAME_SCHEMA_VERSION,
            "max_years": self.max_years,
            "ended_by_cap": self.ended_by_cap,
            **(metadata or {}),
        }
        return saved

    def save(self, path: str | os.PathLike, metadata: dict[str, Any] | None = None) -> Path:
        """Write the game as saved-game JSON (atomically) and return the path."""
        path = Path(path)
        atomic_write_json(path, self.to_saved_game(metadata), indent=None)
        return path


def load_saved_game(path: str | os.PathLike) -> tuple[Game, dict[str, Any]]:
    """Load a game written by :meth:`DiplomacyEnv.save`; returns ``(game, leaguezero block)``.

    The game is rebuilt by the engine (``from_saved_game_format``) with its full phase history.
    Raises :class:`SavedGameError` for a missing file, bad JSON or another schema version.
    """
    path = Path(path)
    if not path.exists():
        raise SavedGameError(f"saved game {path} does not exist")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SavedGameError(f"saved game {path} is not JSON ({err.msg})") from None
    block = saved.get("leaguezero") if isinstance(saved, dict) else None
    version = block.get("schema_version") if isinstance(block, dict) else None
    if version != SAVED_GAME_SCHEMA_VERSION:
        raise SavedGameError(
            f"saved game {path} has leaguezero schema_version {version!r}, this leaguezero "
            f"reads {SAVED_GAME_SCHEMA_VERSION}; use a matching version"
        )
    return from_saved_game_format(saved), dict(block)
