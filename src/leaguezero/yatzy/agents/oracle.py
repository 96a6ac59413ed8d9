"""The ``oracle`` agent and the optimal solitaire simulator, both on numba kernels.

The solver's turn-start values are exported once into a numpy array (:class:`Oracle.values`);
every in-turn decision is then a small numba DP (:mod:`leaguezero.yatzy.oracle.dp`), a few
microseconds per decision with no Python call per decision. In 2-player games the agent plays
solitaire-optimally for its own board: it maximises its own expected final score and ignores
the opponent's, which is the oracle baseline of docs/reference/design.md#oracle-evaluation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.oracle.dp import oracle_action_values, oracle_actions, simulate_solitaire
from leaguezero.yatzy.oracle.solver import Oracle, load_oracle


class OracleAgent:
    """Optimal solitaire play from the exact solver's values; deterministic.

    ``table_path`` overrides the cached solver table (``--oracle-table``); ``oracle`` reuses an
    already loaded one.
    """

    deterministic = True

    def __init__(
        self,
        table_path: str | os.PathLike | None = None,
        name: str = "oracle",
        oracle: Oracle | None = None,
    ) -> None:
        self.name = name
        self.oracle: Oracle = oracle if oracle is not None else load_oracle(table_path)
        self._values = self.oracle.values  # float64 [32768, 64]

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Actions (int64 [len(rows)]) for ``states[rows]``; states int64 [G, STATE_LEN]."""
        out = np.empty(len(rows), dtype=np.int64)
        oracle_actions(self._values, states, np.asarray(rows, dtype=np.int64), out)
        return out

    def action_values(self, states: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Every action's value (float64 [len(rows), 47], NaN if illegal) for ``states[rows]``.

        The value is the mover's expected remaining score (future bonus included) after the
        action, as the solver computes it.
        """
        states = np.ascontiguousarray(states, dtype=np.int64)
        if rows is None:
            rows = np.arange(len(states), dtype=np.int64)
        out = np.empty((len(rows), NUM_ACTIONS))
        oracle_action_values(self._values, states, np.asarray(rows, dtype=np.int64), out)
        return out


@dataclass(frozen=True)
class SolitaireStats:
    """Summary of optimal solitaire games (``yz oracle sim``)."""

    games: int
    seed: int
    mean: float
    std: float
    se: float
    median: float
    min: int
    max: int
    bonus_rate: float  # fraction of games that scored the upper bonus
    yatzy_rate: float  # fraction of games that scored 50 in Yatzy
    scores: np.ndarray  # int64 [games]

    def to_dict(self) -> dict[str, float | int]:
        """The summary without the per-game scores (JSON-ready)."""
        out = {k: v for k, v in self.__dict__.items() if k != "scores"}
        return {k: (v if isinstance(v, int) else float(v)) for k, v in out.items()}


def solitaire_seeds(seed: int, games: int) -> np.ndarray:
    """Per-game seeds (int64 [games]): a pure function of ``seed``, independent of threads."""
    from leaguezero.yatzy.agents.match import episode_seeds  # one derivation of seeds for both

    return episode_seeds(seed, games)


def simulate(oracle: Oracle, games: int, seed: int = 0) -> SolitaireStats:
    """Play ``games`` optimal solitaire games (numba threads in parallel) and summarise them."""
    if games < 1:
        raise ValueError("games must be at least 1")
    seeds = solitaire_seeds(seed, games)
    scores = np.empty(games, dtype=np.int64)
    bonus = np.empty(games, dtype=np.bool_)
    yatzy = np.empty(games, dtype=np.bool_)
    simulate_solitaire(oracle.values, seeds, scores, bonus, yatzy)
    std = float(scores.std(ddof=1)) if games > 1 else 0.0
    return SolitaireStats(
        games=games,
        seed=seed,
        mean=float(scores.mean()),
        std=std,
        se=std / np.sqrt(games),
        median=float(np.median(scores)),
        min=int(scores.min()),
        max=int(scores.max()),
        bonus_rate=float(bonus.mean()),
        yatzy_rate=float(yatzy.mean()),
        scores=scores,
    )
