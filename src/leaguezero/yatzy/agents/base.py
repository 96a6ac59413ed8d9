"""Agents for 2-player matches: anything that maps a batch of states to actions.

An agent's :meth:`Agent.act` receives the whole state array of a lockstep batch of games and the
rows where it is to move, and returns one action per row. Batching lets numba bots, the oracle and
network-guided search amortise their per-call cost over many games. This module holds the
protocol and the two numba bots; :mod:`leaguezero.yatzy.agents.registry` builds any agent from its
name.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from leaguezero.yatzy.agents.bots import greedy_actions, random_actions


class Agent(Protocol):
    name: str
    deterministic: bool  # same states -> same actions (needed for exact 0.5 self-matches)

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Actions (int64 [len(rows)]) for ``states[rows]``; states int64 [G, STATE_LEN]."""
        ...


class RandomAgent:
    """A uniformly random legal action; seeded, so a run is reproducible."""

    deterministic = False

    def __init__(self, seed: int = 0, name: str = "random") -> None:
        self.name = name
        self._rng_state = np.array([seed & 0xFFFFFFFF], dtype=np.int64)

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.int64)
        random_actions(states, rows, self._rng_state, out)
        return out


class GreedyAgent:
    """Marks the best immediate score; keeps the most frequent face (see ``bots.py``)."""

    deterministic = True

    def __init__(self, name: str = "greedy") -> None:
        self.name = name

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.int64)
        greedy_actions(states, rows, out)
        return out
