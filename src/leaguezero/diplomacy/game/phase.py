"""One phase of a no-press game, played: the one phase loop of every caller (OpenSpiel's
``evaluate_bots``).

:func:`play_phase` asks each power that has something to order (in :data:`POWERS` order) for
its orders, checks them against the phase's legal orders (:func:`validate_orders`), hands the
result to the engine and resolves the phase. Rollouts
(:func:`~leaguezero.diplomacy.game.rollout.run_rollout`), the base LM's corpus
(:func:`~leaguezero.diplomacy.llm.base.corpus.collect_examples`), the policy's imitation corpus
(:func:`~leaguezero.diplomacy.train.imitation.collect_corpus`) and the web app's games
(:class:`~leaguezero.web.diplomacy_games.DiplomacyWebGame`) all play through it; each reads what
it records from the returned :class:`PlayedPhase` or from ``on_seat``.

Every order a seat returns is checked against the phase's legal orders. An order that is not
legal for one of the power's orderable locations (or a second order for a location already
ordered, or a build/disband beyond the number owed) is dropped and counted as invalid; an
orderable location left without an order is counted as missing and filled: a unit holds in a
movement phase and a dislodged unit disbands in a retreat phase (its only non-move order). In
an adjustment phase nothing is filled in: the engine waives missing builds and removes units
for missing disbands (civil disorder), as in a real game.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from leaguezero.diplomacy.game.bot_base import WAIVE
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv

# (power, {orderable location: legal orders}) -> the seat's orders (None: no orders)
OrdersFor = Callable[[str, dict[str, list[str]]], Iterable[str] | None]


@dataclass(frozen=True)
class SeatOrders:
    """One power's part of a phase: what it was asked, what it answered, what the engine got.

    ``legal``: what it was asked, {orderable location: legal orders}; ``answer``: its orders
    as returned; ``submitted``: the orders given to the engine (the legal ones of ``answer``,
    fills included); ``invalid``/``missing``: the counts of :func:`validate_orders`.
    """

    power: str
    legal: dict[str, list[str]]
    answer: list[str]
    submitted: list[str]
    invalid: int
    missing: int


@dataclass(frozen=True)
class PlayedPhase:
    """A resolved phase: its name and the seats that were asked, in :data:`POWERS` order (a
    power with nothing to order is not asked and not listed)."""

    phase: str
    seats: dict[str, SeatOrders]


def validate_orders(
    env: DiplomacyEnv, power: str, orders: list[str], legal: dict[str, list[str]]
) -> tuple[list[str], int, int]:
    """Keep the legal orders of ``orders`` and fill missing ones (see module doc).

    Returns ``(orders to submit, invalid count, missing count)``.
    """
    owner: dict[str, str] = {}  # legal order -> its location
    for loc, options in legal.items():
        for option in options:
            if option != WAIVE:
                owner[option] = loc
    adjust = env.phase_type == "A"
    # Builds are capped by the free home centres too; a power owed 3 with 2 sites owes 2.
    quota = min(abs(env.adjustment_count(power)), len(legal)) if adjust else len(legal)
    kept: list[str] = []
    ordered: set[str] = set()
    invalid = 0
    for raw in orders:
        order = " ".join(str(raw).split()).upper()  # tolerate spacing and case
        if adjust and order == WAIVE and env.adjustment_count(power) > 0 and len(kept) < quota:
            kept.append(order)
            continue
        loc = owner.get(order)
        if loc is None or loc in ordered or len(kept) >= quota:
            invalid += 1
            continue
        ordered.add(loc)
        kept.append(order)
    missing = 0
    if adjust:
        missing = max(0, quota - len(kept))
    else:
        for loc, options in legal.items():
            if loc in ordered:
                continue
            missing += 1
            suffix = " H" if env.phase_type == "M" else " D"
            fill = next((o for o in options if o.endswith(suffix)), None)
            if fill is not None:
                kept.append(fill)
    return kept, invalid, missing


def play_phase(
    env: DiplomacyEnv,
    orders_for: OrdersFor,
    on_seat: Callable[[SeatOrders], None] | None = None,
) -> PlayedPhase:
    """Play ``env``'s current phase and resolve it (``env.process()``).

    Each power with legal orders, in :data:`POWERS` order, is asked ``orders_for(power,
    legal)``; its answer is validated (:func:`validate_orders`), shown to ``on_seat`` and then
    set on the engine. ``on_seat`` runs before the orders reach the engine, so it sees the
    board as the seat did, and an exception it raises leaves the seat's orders unset and the
    phase unresolved. Returns what every asked seat was asked, answered and submitted.
    """
    phase = env.phase
    seats: dict[str, SeatOrders] = {}
    for power in POWERS:
        legal = env.legal_orders(power)
        if not legal:
            continue  # nothing to order this phase (no units, no builds owed)
        answer = list(orders_for(power, legal) or [])
        submitted, invalid, missing = validate_orders(env, power, answer, legal)
        seat = SeatOrders(power, legal, answer, submitted, invalid, missing)
        if on_seat is not None:
            on_seat(seat)
        env.set_orders(power, submitted)
        seats[power] = seat
    env.process()
    return PlayedPhase(phase, seats)
