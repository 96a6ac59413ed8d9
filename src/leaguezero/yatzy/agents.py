"""Agents for 2-player matches: anything that maps a batch of states to actions.

An agent's :meth:`act` receives the whole state array of a lockstep batch of games and the rows
where it is to move, and returns one action per row. Batching lets numba bots, the oracle and
network-guided search amortise their per-call cost over many games.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from leaguezero.yatzy.bots import greedy_actions, random_actions

BUILTIN_AGENTS = ("random", "greedy", "oracle", "pretrained")
# The strongest network trained here, shipped with the package (docs/alphazero.md says how it
# was made); ``pretrained`` plays it with the search its checkpoint is for.
PRETRAINED_PATH = Path(__file__).resolve().parent / "pretrained" / "yatzy_turn.pt"


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


class AgentSpecError(ValueError):
    """An agent name that cannot be built; the message lists what is allowed."""


def make_agent(spec: str, seed: int = 0, **options: object) -> Agent:
    """Build an agent from its name: ``random``, ``greedy``, ``oracle``, ``pretrained`` (the
    network shipped with the package; ``pretrained?search=...`` takes model options too) or
    ``model:PATH``.

    ``options`` are passed to model agents (search settings); bots ignore them.
    """
    if spec == "random":
        return RandomAgent(seed=seed)
    if spec == "greedy":
        return GreedyAgent()
    if spec == "oracle":
        from leaguezero.yatzy.oracle_agent import OracleAgent

        return OracleAgent(**{k: v for k, v in options.items() if k == "table_path"})
    if spec == "pretrained" or spec.startswith("pretrained?"):
        if not PRETRAINED_PATH.is_file():
            raise AgentSpecError(
                f"this installation has no pretrained network ({PRETRAINED_PATH} is missing)"
            )
        spec = f"model:{PRETRAINED_PATH}{spec[len('pretrained') :]}"
    if spec.startswith("model:"):
        from leaguezero.yatzy.model_agent import ModelAgent

        return ModelAgent.from_spec(spec[len("model:") :], seed=seed, **options)
    raise AgentSpecError(
        f"unknown agent {spec!r}: use one of {', '.join(BUILTIN_AGENTS)} or model:PATH"
    )
