"""Slow, obvious plain-Python Yatzy: the reference the numba kernels are tested against, and the
baseline that ``benchmarks/rules.py`` measures them against. Nothing here is used in hot paths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

CATEGORY_COUNT = 15
FULL = (1 << CATEGORY_COUNT) - 1


def score(dice: list[int], cat: int) -> int:
    """Points of five dice in category ``cat`` (Scandinavian rules)."""
    counts = {f: dice.count(f) for f in range(1, 7)}
    if cat < 6:
        return counts[cat + 1] * (cat + 1)
    pairs = [f for f in range(1, 7) if counts[f] >= 2]
    if cat == 6:
        return 2 * max(pairs) if pairs else 0
    if cat == 7:
        return 2 * sum(pairs) if len(pairs) >= 2 else 0
    if cat in (8, 9):
        n = 3 if cat == 8 else 4
        faces = [f for f in range(1, 7) if counts[f] >= n]
        return n * max(faces) if faces else 0
    if cat == 10:
        return 15 if sorted(dice) == [1, 2, 3, 4, 5] else 0
    if cat == 11:
        return 20 if sorted(dice) == [2, 3, 4, 5, 6] else 0
    if cat == 12:
        shape = sorted(c for c in counts.values() if c)
        return sum(dice) if shape == [2, 3] else 0
    if cat == 13:
        return sum(dice)
    return 50 if 5 in counts.values() else 0


def scores_for_dice(dice: list[int]) -> list[int]:
    return [score(dice, cat) for cat in range(CATEGORY_COUNT)]


def is_open(avail: int, cat: int) -> bool:
    return bool(avail & (1 << (14 - cat)))


def legal_actions(avail: int, rerolls_left: int) -> list[int]:
    """Legal action indices: keep masks 0..30 while rerolls remain, marks of open categories."""
    keeps = list(range(31)) if rerolls_left > 0 else []
    return keeps + [32 + c for c in range(CATEGORY_COUNT) if is_open(avail, c)]


def kept_dice(dice: list[int], mask: int) -> list[int]:
    """The dice a KeepMask keeps: bit (4 - i) keeps sorted dice[i]."""
    ordered = sorted(dice)
    return [ordered[i] for i in range(5) if mask & (1 << (4 - i))]


@dataclass
class Board:
    avail: int = FULL
    upper: int = 0
    score: int = 0

    def mark(self, dice: list[int], cat: int) -> int:
        if not is_open(self.avail, cat):
            raise ValueError(f"category {cat} is already filled")
        points = score(dice, cat)
        if cat < 6:
            if self.upper < 63 <= self.upper + points:
                points += 50
            self.upper = min(63, self.upper + score(dice, cat))
        self.avail &= ~(1 << (14 - cat))
        self.score += points
        return points


@dataclass
class Match:
    """A 2-player match whose dice come from a callable ``roll(player, round, roll_idx, k)``."""

    roll: object
    boards: list[Board] = field(default_factory=lambda: [Board(), Board()])
    player: int = 0
    dice: list[int] = field(default_factory=list)
    rerolls_left: int = 2

    def __post_init__(self) -> None:
        self.dice = sorted(self.roll(0, 0, 0, 5))

    def round_idx(self, player: int) -> int:
        return CATEGORY_COUNT - bin(self.boards[player].avail).count("1")

    def terminal(self) -> bool:
        return self.boards[0].avail == 0 and self.boards[1].avail == 0

    def legal(self) -> list[int]:
        if self.terminal():
            return []
        return legal_actions(self.boards[self.player].avail, self.rerolls_left)

    def step(self, action: int) -> int:
        if action not in self.legal():
            raise ValueError(f"illegal action {action}")
        if action < 32:
            keep = kept_dice(self.dice, action)
            roll_idx = 3 - self.rerolls_left
            new = self.roll(self.player, self.round_idx(self.player), roll_idx, 5 - len(keep))
            self.dice = sorted(keep + new)
            self.rerolls_left -= 1
            return 0
        points = self.boards[self.player].mark(self.dice, action - 32)
        if self.terminal():
            self.rerolls_left = 0
            return points
        self.player = 1 - self.player
        self.rerolls_left = 2
        self.dice = sorted(self.roll(self.player, self.round_idx(self.player), 0, 5))
        return points


def random_game(rng: random.Random) -> tuple[int, int]:
    """Play one 2-player game with uniformly random actions and random dice; final scores."""

    def roll(player: int, round_idx: int, roll_idx: int, k: int) -> list[int]:
        return [rng.randint(1, 6) for _ in range(k)]

    match = Match(roll)
    while not match.terminal():
        match.step(rng.choice(match.legal()))
    return match.boards[0].score, match.boards[1].score
