"""A seeded Yatzy playthrough as text (OpenSpiel-style golden): greedy against random, every
decision as a player would see it, then the final scores.

Regenerate the golden with one command::

    python -m leaguezero.yatzy.agents.golden > tests/yatzy/golden/playthrough_seed0.txt

``tests/yatzy/agents/test_golden.py`` compares it, so a diff shows what a rules or bot change did.
"""

from __future__ import annotations

import numpy as np

from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.agents.text import describe_move
from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    STATE_LEN,
    apply_action,
    is_terminal,
    new_match,
)
from leaguezero.yatzy.game.tables import DICE, MARK_OFFSET, SCORES


def playthrough(seed: int = 0) -> str:
    """The text of one game between greedy (seat 0) and random (seat 1, seeded by ``seed``)."""
    agents = (GreedyAgent(), RandomAgent(seed=seed))
    state = np.zeros(STATE_LEN, np.int64)
    new_match(state, seed, DICE_KEYED)
    lines = [f"seed {seed}: seat 0 {agents[0].name}, seat 1 {agents[1].name}"]
    while not is_terminal(state):
        seat = int(state[S_PLAYER])
        action = int(agents[seat].act(state[None, :], np.array([0]))[0])
        dice = [int(v) for v in DICE[state[S_DICE]]]
        rerolls = int(state[S_REROLLS])
        points = int(SCORES[state[S_DICE], action - MARK_OFFSET]) if action >= MARK_OFFSET else 0
        apply_action(state, action)
        lines.append(f"seat {seat}: {describe_move(action, dice, rerolls, points)}")
    lines.append(f"final: seat 0 {int(state[S_SCORE])}, seat 1 {int(state[S_SCORE + 1])}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(playthrough(), end="")
