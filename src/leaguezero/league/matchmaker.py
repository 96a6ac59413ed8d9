"""Opponent sampling for league training (league spec §3, §4, §8).

- :func:`cluster_seating` fills a many-seat game with a few unique opponents cloned across
  seats (``[Hero, A, A, A, B, B, B]``), the spec's fallback when serving seven unique adapters
  does not fit in memory.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

Rng = random.Random | np.random.Generator


def _randbelow(rng: Rng, n: int) -> int:
    """A uniform integer in ``[0, n)`` from either kind of generator."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(n))
    return rng.randrange(n)


def cluster_seating(
    hero: str,
    opponents: Sequence[str],
    num_seats: int,
    max_unique: int,
    rng: Rng,
    hero_seat: int | None = None,
) -> list[str]:
    """Seat the hero and at most ``max_unique`` distinct opponents, cloned across seats.

    ``opponents`` is the sampler's draw in order (duplicates allowed); its first ``max_unique``
    distinct names are used. The ``num_seats - 1`` non-hero seats are split into contiguous
    blocks, one per opponent, as evenly as possible (earlier opponents get the extra seat):
    7 seats and 2 opponents give ``[Hero, A, A, A, B, B, B]``. ``hero_seat`` places the hero
    (callers rotate it, e.g. ``game_index % num_seats``, so the hero plays every seat/power);
    None draws it uniformly from ``rng``. Returns one agent name per seat.

    Raises ``ValueError`` when there are no opponents for a game with more than one seat, or
    when ``hero_seat`` is out of range.
    """
    if num_seats < 1:
        raise ValueError(f"num_seats must be at least 1, got {num_seats}")
    if max_unique < 1:
        raise ValueError(f"max_unique must be at least 1, got {max_unique}")
    if hero_seat is None:
        hero_seat = _randbelow(rng, num_seats)
    if not 0 <= hero_seat < num_seats:
        raise ValueError(f"hero_seat {hero_seat} is outside 0..{num_seats - 1}")
    other_seats = num_seats - 1
    unique = list(dict.fromkeys(opponents))[: min(max_unique, other_seats)]
    if other_seats and not unique:
        raise ValueError("cluster_seating needs at least one opponent for a multi-seat game")
    fill: list[str] = []
    if other_seats:
        base, extra = divmod(other_seats, len(unique))
        for i, name in enumerate(unique):
            fill.extend([name] * (base + (1 if i < extra else 0)))
    seats = [*fill[:hero_seat], hero, *fill[hero_seat:]]
    return seats
