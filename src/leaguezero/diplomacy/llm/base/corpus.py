"""The base LM's corpus: bot games turned into (prompt -> answer) examples.

Games of the built-in bots (each seat drawn from ``seat_bots``, a few years each), played by the
phase driver (:func:`~leaguezero.diplomacy.game.phase.play_phase`); every phase of every
*recorded* seat (``record_bots``) becomes one :class:`Example`: the prompt the league loop shows
(:func:`~leaguezero.diplomacy.llm.orders.prompt.build_prompt`) and the bot's orders as the
answer (:func:`answer_text`), one per line in the prompt's location order, then ``END``.
Recording greedy_bot and chaos_bot gives a base that plays a *mixture* of a strong and a wild
style: legal, better than random, and with room for GRPO to sharpen it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from leaguezero.diplomacy.game.catalogue import parse_agents
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.phase import SeatOrders, play_phase
from leaguezero.diplomacy.game.seats import Policy, resolve_agent
from leaguezero.diplomacy.llm.orders.prompt import END_MARK, build_prompt


@dataclass
class Example:
    """One (prompt -> answer) pair: the phase's prompt and the bot's orders."""

    prompt: str
    answer: str
    bot: str
    phase_type: str
    legal: dict[str, list[str]] = field(repr=False)
    owed: int | None = None


def answer_text(orders: Sequence[str], legal: dict[str, list[str]]) -> str:
    """Orders one per line in the prompt's (sorted) location order, numbered as the prompt
    numbers its locations (``2) A PAR - BUR``), then ``END``. Builds and disbands, which are
    fewer than the sites listed, are numbered 1, 2, ... in site order."""
    rank = {}
    for i, loc in enumerate(sorted(legal)):
        for option in legal[loc]:
            rank.setdefault(option, i)
    ordered = sorted(orders, key=lambda o: (rank.get(o, len(rank)), o))
    if len(ordered) == len(legal) and all(o in rank for o in ordered):
        numbers = [rank[o] + 1 for o in ordered]  # one order per listed location
    else:
        numbers = list(range(1, len(ordered) + 1))
    lines = [f"{n}) {order}" for n, order in zip(numbers, ordered, strict=True)]
    return "\n".join([*lines, END_MARK])


def collect_examples(
    games: int,
    *,
    max_years: int = 3,
    seat_bots: Sequence[str] = ("greedy_bot", "chaos_bot", "random_bot"),
    record_bots: Sequence[str] = ("greedy_bot", "chaos_bot"),
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    resolver=None,
) -> list[Example]:
    """Play ``games`` games and return the recorded seats' (prompt, answer) pairs.

    ``seat_bots``/``record_bots``: agent names as the command line gives them (parsed once
    here, :func:`~leaguezero.diplomacy.game.catalogue.parse_agents`); bots unless ``resolver``
    (an :data:`~leaguezero.diplomacy.game.seats.AgentResolver`) builds the others.
    """
    agents = dict(zip(seat_bots, parse_agents(seat_bots), strict=True))
    rng = random.Random(seed)
    examples: list[Example] = []
    for g in range(games):
        seats = {p: rng.choice(list(seat_bots)) for p in POWERS}
        bots = {p: resolve_agent(agents[seats[p]], rng.getrandbits(32), resolver) for p in POWERS}
        env = DiplomacyEnv(max_years=max_years)
        examples.extend(_game_examples(env, seats, bots, record_bots))
        if progress is not None:
            progress(g + 1, games)
    return examples


def _game_examples(
    env: DiplomacyEnv, seats: dict[str, str], bots: dict[str, Policy], record_bots: Sequence[str]
) -> list[Example]:
    """Play ``env`` to its end, ``bots`` at the seats; the examples of the seats whose agent
    (``seats``: {power: name}) is in ``record_bots``, in the order they were played."""
    examples: list[Example] = []

    def record(seat: SeatOrders) -> None:
        if seats[seat.power] in record_bots:
            owed = abs(env.adjustment_count(seat.power)) if env.phase_type == "A" else None
            examples.append(
                Example(
                    build_prompt(env, seat.power, seat.legal),
                    answer_text(seat.submitted, seat.legal),
                    seats[seat.power],
                    env.phase_type,
                    seat.legal,
                    owed,
                )
            )

    while not env.done:
        play_phase(env, lambda power, _legal: bots[power].get_orders(env, power), record)
    return examples
