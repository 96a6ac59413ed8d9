"""Oracle evaluation: solitaire score statistics and oracle diagnostics per agent
(docs/reference/design.md#oracle-evaluation).

An agent's "solitaire" games are the boards it fills in a mirror match against itself (keyed
dice, paired seeds): each game yields two boards, each a full 15-category game played by the
agent. For the oracle the boards are exactly optimal solitaire games, so its numbers are directly
comparable with ``yz oracle sim`` (248.44 expected).
"""

from __future__ import annotations

import numpy as np

from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.agents.match import play_match
from leaguezero.yatzy.game.rules import S_SCORE, S_UPPER
from leaguezero.yatzy.oracle.diagnostics import diagnose_decisions, summarize
from leaguezero.yatzy.oracle.solver import Oracle


def solitaire_eval(agent: Agent, oracle: Oracle, games: int, seed: int) -> dict:
    """Solitaire mean/median/std/bonus rate and oracle match rate / regret for ``agent``.

    ``games`` mirror-match games are played (2 boards each). Returns a JSON-ready dict.
    """
    states_seen: list[np.ndarray] = []
    actions_seen: list[np.ndarray] = []

    def collect(_is_a: bool, states: np.ndarray, actions: np.ndarray) -> None:
        states_seen.append(states.copy())
        actions_seen.append(actions.copy())

    result = play_match(agent, agent, games, seed, on_decision=collect)
    final = result.final_states
    scores = final[:, S_SCORE : S_SCORE + 2].reshape(-1)
    bonus = final[:, S_UPPER : S_UPPER + 2].reshape(-1) >= 63
    diag = diagnose_decisions(oracle, np.concatenate(states_seen), np.concatenate(actions_seen))
    boards = len(scores)
    return {
        "agent": agent.name,
        "boards": boards,
        "mean": float(scores.mean()),
        "se": float(scores.std(ddof=1) / np.sqrt(boards)) if boards > 1 else float("nan"),
        "median": float(np.median(scores)),
        "std": float(scores.std(ddof=1)) if boards > 1 else 0.0,
        "bonus_rate": float(bonus.mean()),
        "scores": scores.tolist(),
        **summarize(diag, boards),
    }
