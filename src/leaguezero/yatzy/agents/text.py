"""A Yatzy game at the table, as a person reads it: moves in words, the oracle's judgment and
hints, and the card's points.

Shared by the terminal game (``yz play``, :mod:`leaguezero.yatzy.agents.play`), the web page
(:mod:`leaguezero.web.yatzy_games`) and the goldens (:mod:`leaguezero.yatzy.agents.golden`), so
a move reads the same wherever it is shown. The state keeps only each seat's totals; a table
keeps the points of each filled box beside it (``filled[seat][box]``, :func:`play_move`).
"""

from __future__ import annotations

import numpy as np

from leaguezero.yatzy.game.rules import S_DICE, S_PLAYER, S_UPPER, apply_action
from leaguezero.yatzy.game.tables import (
    CATEGORIES,
    MARK_OFFSET,
    NUM_UPPER,
    SCORES,
    dice_index,
    keep_bit,
)


def move_text(action: int, dice: list[int]) -> str:
    """A move as the player would type it: ``keep 3 3 5``, ``reroll``, ``mark pair``."""
    if action >= MARK_OFFSET:
        return f"mark {CATEGORIES[action - MARK_OFFSET]}"
    kept = [str(v) for i, v in enumerate(sorted(dice)) if action & keep_bit(i)]
    return f"keep {' '.join(kept)}" if kept else "reroll"


def describe_move(action: int, dice: list[int], rerolls_left: int, points: int = 0) -> str:
    """What a move looks like at the table: ``rolled 1 3 3 5 6, kept 3 3`` or ``rolled ...,
    scored 6 in pair``."""
    rolled = " ".join(str(v) for v in sorted(dice))
    if action >= MARK_OFFSET:
        return f"rolled {rolled}, scored {points} in {CATEGORIES[action - MARK_OFFSET]}"
    kept = [str(v) for i, v in enumerate(sorted(dice)) if action & keep_bit(i)]
    keep_text = f"kept {' '.join(kept)} and rerolled the rest" if kept else "rerolled all five"
    last = " (last reroll)" if rerolls_left == 1 else ""
    return f"rolled {rolled}, {keep_text}{last}"


def oracle_verdict(values: np.ndarray, action: int, dice: list[int]) -> str:
    """The oracle's judgment of ``action``: it agrees, or what it would do and what it cost."""
    best = int(np.nanargmax(values))
    lost = float(np.nanmax(values) - values[action])
    if lost < 1e-9:
        return "the oracle agrees"
    return f"the oracle would {move_text(best, dice)}; that cost you {lost:.2f} expected points"


def oracle_hint(values: np.ndarray, dice: list[int], score: int) -> str:
    """The oracle's five best options now (``values``: its action values), each with the final
    score it expects from ``score`` on, playing on perfectly alone."""
    order = np.argsort(-np.nan_to_num(values, nan=-1e9))
    seen, lines = set(), []
    for a in order:
        if np.isnan(values[a]) or round(float(values[a]), 6) in seen:
            continue  # equal-valued KeepMasks over equal dice: show one
        seen.add(round(float(values[a]), 6))
        text = move_text(int(a), dice)
        if a >= MARK_OFFSET and SCORES[dice_index(dice), a - MARK_OFFSET] == 0:
            text += " (scores 0)"  # a scratch: the box is given up for nothing now
        lines.append(f"  {text:<34} {score + values[a]:8.1f}")
        if len(lines) == 5:
            break
    header = "oracle's best options (your expected final score, playing on perfectly alone):"
    return header + "\n" + "\n".join(lines)


def upper_total(state: np.ndarray, seat: int, filled: list[dict[int, int]] | None) -> int:
    """Points in ``seat``'s upper boxes (ones..sixes), unclamped: the state clamps it at 63, all
    the bonus needs, but a player reads the sum of the boxes."""
    if filled is None:
        return int(state[S_UPPER + seat])
    return sum(points for cat, points in filled[seat].items() if cat < NUM_UPPER)


def play_move(state: np.ndarray, action: int, filled: list[dict[int, int]]) -> int:
    """Apply ``action``; a mark's points (without bonus) go into ``filled``; returns them."""
    player = int(state[S_PLAYER])
    points = 0
    if action >= MARK_OFFSET:
        points = int(SCORES[int(state[S_DICE]), action - MARK_OFFSET])
        filled[player][action - MARK_OFFSET] = points
    apply_action(state, action)
    return points
