"""The league's payoff table and its Nash-averaged ratings (issue 52; docs/reference/league.md).

**The table.** For every pair of agents seen in one game, the spec's pairwise decomposition of a
multi-player result (:meth:`~leaguezero.league.types.MatchResult.pairwise_outcomes`): a seat of
A against a seat of B scores 1 / 0.5 / 0 as its final score is higher / equal / lower. Entry
``(a, b)`` is A's mean over the games where both sat (each game first averaged over its A-B
seat pairs, so a game with three seats of each counts once), with the number of games and a
95% interval (normal, over games; clipped to [0, 1]). A 2-player game (Yatzy) is the same with
one pair.

**Nash averaging** (Balduzzi et al. 2018, "Re-evaluating evaluation"): the 7-player results are
reduced to the symmetric two-player meta-game whose payoff to A against B is ``P[a, b] - 1/2``
(antisymmetrised: ``(P[a, b] - P[b, a]) / 2``; 0 where the pair never met). Its maximum-entropy
Nash equilibrium ``p`` is the league's "hardest" mixture; an agent's rating is its expected
payoff against it, ``(A p)_a``: 0 for every agent in the equilibrium's support, negative for
agents the mixture beats. Unlike Elo it is invariant to adding copies of an agent and does not
rank a cycle (rock, paper, scissors all rate 0 whatever their counts).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from leaguezero.league.types import MatchResult

__all__ = ["PayoffTable", "maxent_nash", "nash_average", "payoff_table"]

Z95 = 1.959963984540054


@dataclass
class PayoffTable:
    """``mean[i, j]``: agent i's mean pairwise score against j (NaN where they never met);
    ``games[i, j]``: games both sat in; ``low``/``high``: the 95% interval (module doc)."""

    agents: list[str]
    mean: np.ndarray
    games: np.ndarray
    low: np.ndarray
    high: np.ndarray
    kinds: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        def cell(i: int, j: int) -> dict | None:
            if not self.games[i, j]:
                return None
            low, high = float(self.low[i, j]), float(self.high[i, j])
            return {
                "mean": float(self.mean[i, j]),
                "games": int(self.games[i, j]),
                # One game: no interval (JSON has no NaN).
                "low": low if math.isfinite(low) else None,
                "high": high if math.isfinite(high) else None,
            }

        return {
            "agents": list(self.agents),
            "kinds": list(self.kinds),
            "table": {
                a: {b: cell(i, j) for j, b in enumerate(self.agents) if j != i}
                for i, a in enumerate(self.agents)
            },
        }


def payoff_table(
    matches: Iterable[MatchResult],
    *,
    kinds: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
) -> PayoffTable:
    """The payoff table of ``matches`` (module doc): those of ``kinds`` only (e.g.
    ``("evaluation",)``; None: all), over ``agents`` (None: every agent that played, in order of
    first appearance)."""
    per_game: dict[tuple[str, str], list[float]] = {}
    order: dict[str, None] = dict.fromkeys(agents or ())
    for match in matches:
        if kinds is not None and match.kind not in kinds:
            continue
        sums: dict[tuple[str, str], list[float]] = {}
        for participant in match.participants:
            if agents is None:
                order.setdefault(participant.agent)
        for a, b, score_a, _ in match.pairwise_outcomes():
            for key, value in (((a, b), score_a), ((b, a), 1.0 - score_a)):
                total = sums.setdefault(key, [0.0, 0.0])
                total[0] += value
                total[1] += 1.0
        for key, (total, count) in sums.items():
            per_game.setdefault(key, []).append(total / count)
    names = list(order)  # the given agents, or everyone in order of first appearance
    index = {n: i for i, n in enumerate(names)}
    k = len(names)
    mean = np.full((k, k), np.nan)
    games = np.zeros((k, k), dtype=np.int64)
    low = np.full((k, k), np.nan)
    high = np.full((k, k), np.nan)
    for (a, b), values in per_game.items():
        if a not in index or b not in index:
            continue
        i, j = index[a], index[b]
        n = len(values)
        m = float(np.mean(values))
        se = float(np.std(values, ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
        mean[i, j], games[i, j] = m, n
        if math.isfinite(se):
            low[i, j], high[i, j] = max(0.0, m - Z95 * se), min(1.0, m + Z95 * se)
    return PayoffTable(names, mean, games, low, high, list(kinds or []))


def maxent_nash(payoff: np.ndarray, *, tol: float = 1e-9) -> np.ndarray:
    """The maximum-entropy Nash equilibrium of the symmetric zero-sum game with antisymmetric
    ``payoff`` (row player's): the mixture ``p`` of largest entropy with ``p^T A >= 0``
    componentwise (it guarantees the game's value, 0, against every pure strategy). A linear
    program finds the equilibria's value margin, then SLSQP maximises the entropy over them."""
    from scipy.optimize import linprog, minimize

    a = np.asarray(payoff, dtype=float)
    k = a.shape[0]
    if k == 0:
        return np.zeros(0)
    if k == 1:
        return np.ones(1)
    # An equilibrium: max v s.t. A^T p >= v, sum p = 1, p >= 0 (v = 0 for antisymmetric A).
    res = linprog(
        c=np.r_[np.zeros(k), -1.0],
        A_ub=np.c_[-a.T, np.ones(k)],
        b_ub=np.zeros(k),
        A_eq=np.r_[np.ones(k), 0.0][None, :],
        b_eq=[1.0],
        bounds=[(0, None)] * k + [(None, None)],
        method="highs",
    )
    start = res.x[:k] if res.success else np.full(k, 1.0 / k)
    value = float(-res.fun) if res.success else 0.0

    def negative_entropy(p: np.ndarray) -> float:
        q = np.clip(p, 1e-12, None)
        return float(np.sum(q * np.log(q)))

    def gradient(p: np.ndarray) -> np.ndarray:
        return np.log(np.clip(p, 1e-12, None)) + 1.0

    constraints = [
        {"type": "eq", "fun": lambda p: np.sum(p) - 1.0, "jac": lambda p: np.ones(k)},
        {"type": "ineq", "fun": lambda p: a.T @ p - value + tol, "jac": lambda p: a.T},
    ]
    best = minimize(
        negative_entropy,
        np.clip(0.5 * start + 0.5 / k, 1e-6, None),
        jac=gradient,
        bounds=[(0.0, 1.0)] * k,
        constraints=constraints,
        method="SLSQP",
        options={"maxiter": 500, "ftol": 1e-12},
    )
    p = best.x if best.success and np.all(a.T @ best.x >= value - 1e-6) else start
    p = np.clip(p, 0.0, None)
    return p / p.sum()


def nash_average(table: PayoffTable) -> dict[str, dict[str, float]]:
    """Each agent's Nash-averaged rating and its weight in the max-entropy equilibrium of the
    table's meta-game (module doc): ``{agent: {"rating": (A p)_a, "nash_weight": p_a}}``."""
    mean = np.nan_to_num(table.mean - 0.5, nan=0.0)
    payoff = (mean - mean.T) / 2.0  # exactly antisymmetric (the table already is, up to NaN)
    p = maxent_nash(payoff)
    ratings = payoff @ p
    return {
        name: {"rating": float(ratings[i]), "nash_weight": float(p[i])}
        for i, name in enumerate(table.agents)
    }


def plot_payoff(table: PayoffTable, out_path, ratings: dict[str, dict[str, float]] | None = None):
    """Write the table as a heatmap PNG (row agent's mean pairwise score against the column's,
    blank where they never met; the Nash-averaged rating beside each row's name)."""
    import io
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leaguezero.common.atomic import atomic_write_bytes

    k = len(table.agents)
    size = max(4.0, 0.6 * k + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    shown = np.ma.masked_invalid(table.mean)
    image = ax.imshow(shown, cmap="RdBu", vmin=0.0, vmax=1.0)
    for i in range(k):
        for j in range(k):
            if table.games[i, j]:
                ax.text(j, i, f"{table.mean[i, j]:.2f}", ha="center", va="center", fontsize=7)
    labels = [
        f"{name} ({ratings[name]['rating']:+.3f})" if ratings else name for name in table.agents
    ]
    ax.set_xticks(range(k), [n[:18] for n in table.agents], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(k), [label[:30] for label in labels], fontsize=7)
    ax.set_title("Mean pairwise score, row vs column (Nash-averaged rating)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(Path(out_path), buffer.getvalue())
    return Path(out_path)
