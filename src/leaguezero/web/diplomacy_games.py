"""The web app's one door into Diplomacy: games watched, played or replayed on the map.

Every import of Diplomacy internals (the env, bots, agent resolution, order validation, saved
games, the engine's SVG renderer) is in this module, so a reshaped ``diplomacy`` package is
re-pointed here only. A phase is played by the phase driver every rollout uses
(:func:`~leaguezero.diplomacy.game.phase.play_phase`): each agent's orders are checked against
the phase's legal orders, missing ones filled (units hold); the person's orders must all be legal.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from diplomacy import Game
from diplomacy.engine.renderer import Renderer

from leaguezero.diplomacy.game.catalogue import (
    BOT_NAMES,
    PRETRAINED,
    PRETRAINED_LLM,
    PRETRAINED_SMOL,
    SMOLLM2,
    is_bot,
)
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv, SavedGameError
from leaguezero.diplomacy.game.phase import play_phase, validate_orders
from leaguezero.diplomacy.game.rollout import seat_seed
from leaguezero.diplomacy.game.seats import resolve_agent
from leaguezero.web.diplomacy_board import (
    label_phase,
    mark_results,
    order_results,
    orders_with_results,
    outcome,
    phase_name,
)
from leaguezero.web.diplomacy_upload import check_saved_game
from leaguezero.web.limits import MAX_UPLOAD_DEPTH

MAX_YEARS = 20  # longest game the page starts (the engine's own games go on until a solo)
# The agents a page may seat, by catalogue name only: a request never names a path, so nothing
# of this machine's files is opened (or loaded for seconds) on a client's say-so. The shipped
# agents play only where they ship (the catalogue refuses them otherwise, in one line).
WEB_AGENTS = (*BOT_NAMES, PRETRAINED, PRETRAINED_LLM, PRETRAINED_SMOL, SMOLLM2)
log = logging.getLogger(__name__)


class OrderError(ValueError):
    """Orders the person sent that are not legal now, or a step that cannot be taken."""


def agent_choices() -> dict[str, Any]:
    """What the page offers: the bots, every agent name it plays (:data:`WEB_AGENTS`) and the
    seven powers."""
    return {"bots": list(BOT_NAMES), "agents": list(WEB_AGENTS), "powers": list(POWERS)}


def shown_name(name: str) -> str:
    """An agent name as an answer may show it: a path by its last part only, 60 characters."""
    short = f".../{Path(name).name}" if "/" in name else name
    return short if len(short) <= 60 else short[:57] + "..."


def _agents(names: list[str], seed: int):
    """``names`` parsed once by the agent catalogue, ``({name: spec}, resolver)``: the resolver
    plays the checkpoint files and LLM folders among them (None: all bots).

    Raises ValueError for a name the agent catalogue does not accept (the message lists what
    it accepts).
    """
    from leaguezero.diplomacy.agents.resolvers import command_resolver
    from leaguezero.diplomacy.game.catalogue import load_diplomacy_config, parse_agents

    specs = parse_agents(names)  # AgentSpecError is a ValueError
    cfg = load_diplomacy_config(None, [f"run.seed={seed}"])
    return dict(zip(names, specs, strict=True)), command_resolver(specs, cfg, greedy=True)


class DiplomacyWebGame:
    """A game on the map: agents on every power but ``human`` (None: watch only), or a saved
    game to replay (``replay=True``: no new phases). ``lock`` serialises calls on one game."""

    def __init__(
        self,
        env: DiplomacyEnv,
        agents: dict[str, str],
        human: str | None = None,
        policies: dict[str, Any] | None = None,
        replay: bool = False,
    ) -> None:
        self.env, self.agents, self.human, self.replay = env, agents, human, replay
        self.policies = policies or {}
        self.lock = threading.Lock()
        self.notes: dict[str, list[str]] = {}  # {phase: what was said while it was played}
        self._renderer: Renderer | None = None

    # ------------------------------------------------------------------ phases
    def phases(self) -> list[str]:
        """Every phase of the game so far, oldest first; the last is the current one."""
        names = [str(p.name) for p in self.env.game.get_phase_history()]
        return [*names, self.env.phase]  # ends with COMPLETED once the game is over

    def _board(self, index: int) -> tuple[Game, dict[str, list[str]], dict[str, list[str]]]:
        """The game at phase ``index`` with that phase's orders set, and its results (past
        phases; the current one has neither)."""
        history = self.env.game.get_phase_history()
        if index >= len(history):
            return self.env.game, {}, {}
        past = history[index]
        game = Game(map_name=self.env.game.map_name, rules=list(self.env.game.rules))
        game.set_state(past.state)
        orders = {p: list(o) for p, o in (past.orders or {}).items() if o}
        for power, power_orders in orders.items():
            game.set_orders(power, power_orders)
        return game, orders, order_results(past)

    def svg(self, game: Game, results: dict[str, list[str]] | None = None) -> str:
        """The standard map of ``game`` with its units, centres and orders, the ``results``
        marked, as SVG text; a finished game's note says how it ended (not the engine's
        "Victory by" every power left, for a stop at the year cap)."""
        if self._renderer is None:
            self._renderer = Renderer(game)
        self._renderer.game = game  # the parsed map is reused; only the game changes
        note = game.note
        finished = game is self.env.game and self.env.done
        if finished:
            game.note = outcome(game, True, self.env.last_year) or note
        try:
            svg = self._renderer.render(incl_orders=True)
        finally:
            game.note = note
        if finished:  # not the phase the year cap stopped the game in, never played
            svg = label_phase(svg, "FINAL")
        return mark_results(svg, self._renderer, results or {})

    def power_colours(self) -> dict[str, str]:
        """``{power: colour}`` as the map draws each power."""
        if self._renderer is None:
            self._renderer = Renderer(self.env.game)
        return {p: self._renderer.metadata["color"][p] for p in POWERS}

    def preview(self, orders: list[str]) -> str:
        """The current board with the person's chosen ``orders`` drawn (those legal now; the
        rest left out), before they are submitted: the engine's own arrows, as after Submit."""
        if not self.human or self.env.done or self.replay:
            raise OrderError("there are no orders of yours to draw now")
        legal = {o for found in self.env.legal_orders(self.human).values() for o in found}
        game = self.env.game
        game.set_orders(self.human, [o for o in orders if o in legal], expand=False)
        try:
            return self.svg(game)
        finally:
            game.clear_orders(self.human)

    def locked_preview(self, orders: list[str]) -> dict[str, Any]:
        """:meth:`preview` under the game's lock, as ``{"svg": ...}``."""
        with self.lock:
            return {"svg": self.preview(orders)}

    def _last_turn(self, current: int) -> dict[str, Any] | None:
        """The last movement phase played before ``current`` (its map, orders and results), and
        the retreats and adjustments played after it (``then``: names and orders), with what was
        said while they were played; None before the first movement is resolved."""
        history = self.env.game.get_phase_history()[:current]
        moves = [
            i for i, past in enumerate(history)  # the cap's unplayed phase has no orders
            if str(past.name).endswith("M") and any((past.orders or {}).values())
        ]  # fmt: skip
        if not moves:
            return None
        turn = self._phase_view(moves[-1])
        turn.pop("game")
        turn["then"] = []
        for index in range(moves[-1] + 1, current):
            after = self._phase_view(index)
            if any(after["orders"].values()):
                turn["then"].append({k: after[k] for k in ("phase", "phase_name", "orders")})
        played = [str(p.name) for p in history[moves[-1] :]]
        turn["notes"] = [note for phase in played for note in self.notes.get(phase, [])]
        return turn

    def _phase_view(self, index: int) -> dict[str, Any]:
        """One phase's map, name and orders (with their results)."""
        game, orders, results = self._board(index)
        code = self.phases()[index]
        return {
            "phase": code,
            "phase_name": phase_name(code),
            "svg": self.svg(game, results),
            "orders": orders_with_results(orders, results),
            "game": game,
        }

    def view(self, index: int | None = None) -> dict[str, Any]:
        """The board at phase ``index`` (default: the current one), JSON-able: the SVG map, each
        power's agent, centres, units and that phase's orders with their results; on the
        current phase the phase just played (``played``: its name, map and orders) and the
        person's legal orders when they have any; how the game ended once it has. Raises
        OrderError for a bad index."""
        phases = self.phases()
        current = len(phases) - 1
        index = current if index is None else index
        if not 0 <= index <= current:
            raise OrderError(f"phase index {index} is out of range 0..{current}")
        shown = self._phase_view(index)
        game = shown.pop("game")
        powers = [
            {
                "power": p,
                "agent": "you" if p == self.human else self.agents.get(p, "?"),
                "centers": len(game.powers[p].centers),
                "units": list(game.powers[p].units),
                "orders": [o["order"] for o in shown["orders"].get(p, [])],
            }
            for p in POWERS
        ]
        last_turn = self._last_turn(current) if index == current else None
        legal: dict[str, list[str]] = {}
        owed = 0
        if self.human and index == current and not self.env.done:
            legal = self.env.legal_orders(self.human)
            owed = self.env.adjustment_count(self.human)
        return {
            "mode": "replay" if self.replay else "play" if self.human else "watch",
            "human": self.human,
            "phases": phases,
            "phase_names": [phase_name(p) for p in phases],
            "index": index,
            **shown,
            "done": bool(self.env.done),
            # at the last phase only: a replay does not give its ending away from the start
            "outcome": outcome(self.env.game, bool(self.env.done), self.env.last_year)
            if index == current
            else None,
            "powers": powers,
            "colours": self.power_colours(),
            "last_turn": last_turn,
            "legal": legal,
            "phase_type": self.env.phase_type if index == current else None,
            "adjustment": owed,
        }

    def locked_view(self, index: int | None = None) -> dict[str, Any]:
        """:meth:`view` under the game's lock (for the worker pool)."""
        with self.lock:
            return self.view(index)

    def locked_step(self, orders: list[str] | None = None) -> dict[str, Any]:
        """:meth:`step`, the phases after it where the person has nothing to order played
        through (:meth:`play_through`), then the new current phase's :meth:`view`, under the
        game's lock."""
        with self.lock:
            self.step(orders)
            self.play_through()
            return self.view()

    def play_through(self) -> None:
        """Play on while the person has nothing to order in a retreat or adjustment phase (no
        unit of theirs dislodged, nothing owed) and the game goes on. A movement phase waits for
        a click even with nothing to order (an eliminated power), so one request plays at most
        the year's retreats and adjustments, never the rest of a game."""
        env = self.env
        while self.human and env.phase_type in ("R", "A") and not env.legal_orders(self.human):
            self.step([])

    # ------------------------------------------------------------------- play
    def step(self, orders: list[str] | None = None) -> None:
        """Play the current phase: the person's ``orders`` are checked (all legal, or
        :class:`OrderError` before any agent is asked or any order set), then every seat
        orders and the engine resolves the phase
        (:func:`~leaguezero.diplomacy.game.phase.play_phase`)."""
        if self.replay:
            raise OrderError("a replay cannot be played on; start a new game")
        if self.env.done:
            raise OrderError("the game is over")
        env = self.env
        if self.human:
            self._check_orders(self.human, list(orders or []))

        def orders_for(power: str, _legal: dict[str, list[str]]) -> list[str] | None:
            if power == self.human:
                return orders
            return self.policies[power].get_orders(env, power)

        played = play_phase(env, orders_for)
        for power, seat in played.seats.items():
            if power == self.human and seat.missing:
                self._note(played.phase, f"{seat.missing} of your units without orders hold")
            elif power != self.human and seat.invalid:
                self._note(played.phase, f"{power} gave {seat.invalid} illegal order(s), dropped")

    def _check_orders(self, power: str, orders: list[str]) -> None:
        """Raise :class:`OrderError` unless every one of the person's ``orders`` is legal now
        (one per unit, builds and waives as owed; none when ``power`` has nothing to order)."""
        env, phase = self.env, self.env.phase
        legal = env.legal_orders(power)
        if not legal:
            if orders:
                raise OrderError(f"{power} has nothing to order in {phase}")
            return
        submitted, bad, _ = validate_orders(env, power, orders, legal)
        if bad:
            # what was refused: the orders sent less those kept, counting repeats
            kept = Counter(" ".join(o.split()).upper() for o in submitted)
            refused = Counter(" ".join(o.split()).upper() for o in orders) - kept
            raise OrderError(
                f"not legal for {power} in {phase} (one order per unit, builds and "
                f"waives as owed): {', '.join(refused.elements())}"
            )

    def _note(self, phase: str, text: str) -> None:
        self.notes.setdefault(phase, []).append(f"{phase_name(phase)}: {text}")


def new_game(
    agents: dict[str, str], human: str | None, max_years: int, seed: int
) -> DiplomacyWebGame:
    """Seat ``agents`` ({power: name}; the human's power needs none) and start a game.

    Raises ValueError for a bad power, a missing agent or an agent nobody can play.
    """
    if human is not None and human not in POWERS:
        raise ValueError(f"power {human!r} is not one of {', '.join(POWERS)}")
    if not 1 <= max_years <= MAX_YEARS:
        raise ValueError(f"max_years must be 1..{MAX_YEARS}, got {max_years}")
    unknown = sorted(set(agents) - set(POWERS))
    if unknown:
        raise ValueError(f"unknown power(s) {', '.join(unknown)}: use {', '.join(POWERS)}")
    seats = {p: agents.get(p, "").strip() for p in POWERS if p != human}
    empty = [p for p, name in seats.items() if not name]
    if empty:
        raise ValueError(f"no agent for {', '.join(empty)}")
    unknown = sorted({name for name in seats.values() if name not in WEB_AGENTS})
    if unknown:  # refused by name, before the catalogue looks at a file or anything loads
        raise ValueError(
            f"unknown agent(s) {', '.join(shown_name(n) for n in unknown)}: the web app plays "
            f"{', '.join(WEB_AGENTS)} by name, never a path (a checkpoint file or an LLM folder "
            "plays in leaguezero diplomacy play)"
        )
    try:
        specs, resolver = _agents(sorted(set(seats.values())), seed)
        policies = {
            p: resolve_agent(specs[name], seat_seed(seed, p), resolver) for p, name in seats.items()
        }
    except Exception:  # the loaders' own messages carry paths and advice meant for programmers
        log.warning("a shipped agent did not load", exc_info=True)  # the server's log only
        shipped = sorted({name for name in seats.values() if not is_bot(name)})
        raise ValueError(
            f"agent(s) {', '.join(shipped)} cannot be played in this installation (not shipped, "
            "or a wheel it needs is missing; the server's log says which)"
        ) from None
    return DiplomacyWebGame(DiplomacyEnv(max_years=max_years), seats, human, policies)


def read_upload(body: bytes) -> dict[str, Any]:
    """An uploaded saved game, parsed, checked (:func:`check_saved_game`) and proven readable:
    the engine loads it and renders its first phase. Returns the parsed document.

    Meant for :func:`~leaguezero.web.workers.run_in_child` (the engine's work is bounded by the
    checks, and the child's CPU limit bounds what the checks miss). Raises ValueError with one
    line: not JSON, nested too deeply, over a bound, or not a game this version reads.
    """
    import json

    try:
        saved: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the upload is not JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"the upload is nested more than {MAX_UPLOAD_DEPTH} deep") from None
    load_replay(saved).locked_view(0)
    return saved


def load_replay(saved: dict[str, Any]) -> DiplomacyWebGame:
    """A saved game (what ``leaguezero diplomacy play`` writes) opened for replay.

    Raises ValueError (a :class:`SavedGameError`) when it is not one this version reads, or one
    :func:`check_saved_game` refuses.
    """
    import json
    import tempfile

    from leaguezero.diplomacy.game.env import load_saved_game

    check_saved_game(saved)
    # load_saved_game reads a file and checks the schema: hand it the upload as one.
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "upload.json"
        path.write_text(json.dumps(saved), encoding="utf-8")
        try:
            game, block = load_saved_game(path)
        except SavedGameError as err:
            raise ValueError(str(err).replace(f"saved game {path}", "the uploaded game")) from None
        except Exception as err:  # the engine's own complaint about a malformed game
            why = str(err).splitlines()[0][:120] if str(err).strip() else type(err).__name__
            raise ValueError(f"the uploaded game cannot be read: {why}") from None
    agents = {str(k): str(v) for k, v in (block.get("power_agents") or {}).items()}
    env = DiplomacyEnv(max_years=block.get("max_years"), game=game)
    return DiplomacyWebGame(env, agents, replay=True)
