"""The base of the seeded bots: dispatch on the phase type, the adjustment count, order helpers."""

from __future__ import annotations

import random
from typing import ClassVar

from leaguezero.diplomacy.game.env import DiplomacyEnv

WAIVE = "WAIVE"


def is_move(order: str) -> bool:
    """A plain (not convoyed) move: ``"A PAR - BUR"`` (not ``"A PAR S A MAR - BUR"``)."""
    parts = order.split()
    return len(parts) >= 4 and parts[2] == "-" and parts[-1] != "VIA"


def move_destination(order: str) -> str:
    """The destination location of a move order (``"F MAO - SPA/NC"`` -> ``"SPA/NC"``)."""
    return order.split(" - ", 1)[1].removesuffix(" VIA")


class Bot:
    """Base for seeded bots: dispatches on the phase type, handles the adjustment count."""

    name: ClassVar[str] = "bot"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders for ``power`` in the current phase (only legal ones)."""
        legal = env.legal_orders(power)
        if not legal:
            return []
        if env.phase_type == "M":
            return self.movement(env, power, legal)
        if env.phase_type == "R":
            return self.retreat(env, power, legal)
        if env.phase_type == "A":
            count = env.adjustment_count(power)
            if count > 0:
                return self.builds(env, power, legal, count)
            if count < 0:
                return self.disbands(env, power, legal, -count)
        return []

    # Subclasses override these; the defaults are random_bot's.
    def movement(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        return [self.rng.choice(orders) for orders in legal.values() if orders]

    def retreat(self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]]) -> list[str]:
        return [self.rng.choice(orders) for orders in legal.values() if orders]

    def builds(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        sites = [loc for loc, orders in legal.items() if orders]
        chosen = self.rng.sample(sites, min(count, len(sites)))
        return [self.rng.choice(legal[loc]) for loc in chosen]

    def disbands(
        self, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], count: int
    ) -> list[str]:
        units = [loc for loc, orders in legal.items() if orders]
        chosen = self.rng.sample(units, min(count, len(units)))
        return [disband_order(legal[loc]) for loc in chosen]


def disband_order(orders: list[str]) -> str:
    """The disband order among a unit's options (every retreat and removal list has one)."""
    return next(order for order in orders if order.endswith(" D"))
