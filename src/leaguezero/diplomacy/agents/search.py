"""Decision-time search over a policy with a value head (``search:AGENT?k=8&iters=64``).

SearchBot's recipe (Gray et al. 2020), small: in a movement phase, the searching power and
its ``powers - 1`` nearest neighbours (most pairs of adjacent units) each get ``k`` candidate
joint orders: the policy's most probable joint order (the one the raw agent plays greedily)
first, then samples from the policy (duplicates dropped); every other power plays one policy
sample. Each combination of the searched powers' candidates is resolved by the real
engine for one phase on a copy of the game and valued by the value head for every searched
power (one batched forward over all resulting boards), giving a payoff tensor
``[n, K_1, .., K_n]``. :func:`regret_matching` runs ``iters`` iterations on it, and the
searching power samples its orders from its averaged strategy. Retreat and adjustment phases
are played by the policy.

Deterministic under a seed: candidates come from actors seeded from the agent's stream and
regret matching is exact (expected payoffs, no sampling), so the same seed and position give
the same orders. ``budget_s`` (CPU seconds per phase, 0: none) stops the resolutions when it
is spent; the power then plays its first candidate (the policy's greedy orders) and
``over_budget`` counts it (only then does wall time change what is played). With ``k=1``
the search plays exactly what the greedy raw policy plays.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from leaguezero.diplomacy.agents.actor import PhaseBoard
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.features import adjacency, board_features, location_index

if TYPE_CHECKING:
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy


@dataclass(frozen=True)
class SearchSettings:
    """The search's knobs (``search:AGENT?k=..&iters=..&powers=..&budget=..``)."""

    k: int = 8  # candidate joint orders sampled per searched power
    iters: int = 64  # regret-matching iterations
    powers: int = 2  # the searching power and its powers - 1 nearest neighbours
    budget_s: float = 0.0  # CPU seconds per phase for the resolutions (0: no limit)

    @classmethod
    def from_pairs(cls, pairs: tuple[tuple[str, float], ...]) -> SearchSettings:
        """From an agent name's settings (``budget`` is ``budget_s``); raises ValueError."""
        named = {"budget_s" if key == "budget" else key: value for key, value in pairs}
        return cls(**named)

    def __post_init__(self) -> None:
        if self.k < 1 or self.iters < 1 or not 1 <= self.powers <= 3 or self.budget_s < 0:
            raise ValueError(
                f"search settings k >= 1, iters >= 1, powers 1..3, budget >= 0; got {self}"
            )


def regret_matching(payoffs: np.ndarray, iters: int) -> list[np.ndarray]:
    """Average strategies of ``iters`` simultaneous regret-matching iterations.

    ``payoffs [n, K_1, .., K_n]`` float: player i's payoff at each joint action. Each
    iteration every player's strategy is its positive regrets normalised (uniform when none
    is positive); regrets grow by each action's expected payoff against the others' current
    strategies less the strategy's own. In a two-player zero-sum game the averages converge to
    a Nash equilibrium. Returns the n average strategies, ``[K_i]`` each.
    """
    n = payoffs.shape[0]
    sizes = payoffs.shape[1:]
    if len(sizes) != n:
        raise ValueError(f"payoffs of {n} players need {n} action axes, got {payoffs.shape}")
    regrets = [np.zeros(k) for k in sizes]
    totals = [np.zeros(k) for k in sizes]
    for _ in range(iters):
        strategies = [_positive_part(r) for r in regrets]
        for i in range(n):
            utility = payoffs[i]
            for j in reversed(range(n)):  # contract the last axes first: indices stay put
                if j != i:
                    utility = np.tensordot(utility, strategies[j], axes=([j], [0]))
            regrets[i] += utility - strategies[i] @ utility
            totals[i] += strategies[i]
    return [t / t.sum() for t in totals]


def _positive_part(regret: np.ndarray) -> np.ndarray:
    positive = np.maximum(regret, 0.0)
    total = positive.sum()
    return positive / total if total > 0 else np.full(len(regret), 1.0 / len(regret))


def nearest_powers(env: DiplomacyEnv, power: str, count: int) -> list[str]:
    """``power`` and the ``count - 1`` others with most (own unit, their unit) adjacent pairs
    (ties in the order of :data:`POWERS`), among powers with orders to give."""
    index, adj = location_index(), adjacency() > 0
    mine = [index[u.split()[1]] for u in env.units(power)]
    touching = []
    for other in POWERS:
        if other == power or not env.legal_orders(other):
            continue
        theirs = [index[u.split()[1]] for u in env.units(other)]
        touching.append((-int(adj[np.ix_(mine, theirs)].sum()), POWERS.index(other), other))
    return [power, *(name for _, _, name in sorted(touching)[: count - 1])]


class SearchAgent:
    """A seat player that searches at movement phases (module doc)."""

    def __init__(self, policy: DiplomacyPolicy, settings: SearchSettings, *, seed: int) -> None:
        if policy.net.value_head is None:
            raise ValueError(
                "search needs a policy with a value head (pretrain-policy --value-coef > 0)"
            )
        self.policy = policy
        self.settings = settings
        self.rng = np.random.default_rng(seed)
        self.records: list = []  # a search seat does not train
        self.over_budget = 0
        self.last: dict | None = None  # the last search: players, candidates, payoffs, strategy

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders for ``power`` (only legal ones: every candidate is a policy sample)."""
        seed = int(self.rng.integers(2**31))
        if env.phase_type != "M":
            return self.policy.actor(seed=seed).get_orders(env, power)
        started = time.process_time()
        players = nearest_powers(env, power, self.settings.powers)
        fixed = {
            p: self.policy.actor(seed=seed + 1 + i).get_orders(env, p)
            for i, p in enumerate(POWERS)
            if p not in players and env.legal_orders(p)
        }
        candidates = [self._candidates(env, p, seed + 100 * (i + 1)) for i, p in enumerate(players)]
        combos = list(itertools.product(*(range(len(c)) for c in candidates)))
        boards: list[PhaseBoard] = []
        for combo in combos:
            if self.settings.budget_s and time.process_time() - started > self.settings.budget_s:
                self.over_budget += 1
                return candidates[0][0]
            after = env.copy()
            for p, orders in fixed.items():
                after.set_orders(p, orders)
            for p, c, i in zip(players, candidates, combo, strict=True):
                after.set_orders(p, c[i])
            after.process()
            boards += [PhaseBoard(torch.from_numpy(board_features(after, p))) for p in players]
        with torch.no_grad():
            values = self.policy.values(boards).double().numpy()
        shape = (len(combos), len(players))
        payoffs = np.moveaxis(values.reshape(shape), 1, 0).reshape(
            len(players), *(len(c) for c in candidates)
        )
        strategy = regret_matching(payoffs, self.settings.iters)[0]
        choice = int(self.rng.choice(len(strategy), p=strategy))
        self.last = {
            "players": players,
            "candidates": candidates,
            "payoffs": payoffs,
            "strategy": strategy,
        }
        return candidates[0][choice]

    def _candidates(self, env: DiplomacyEnv, power: str, seed: int) -> list[list[str]]:
        """Up to ``k`` distinct joint orders of ``power``: the policy's greedy one, then samples.

        The greedy candidate keeps the raw agent's play in every search (a search whose values
        are noise can only move away from it by regret, not by the luck of k samples)."""
        greedy = self.policy.actor(seed=seed, greedy=True).get_orders(env, power)
        seen: dict[tuple[str, ...], list[str]] = {tuple(sorted(greedy)): greedy}
        actor = self.policy.actor(seed=seed)
        for _ in range(self.settings.k - 1):
            orders = actor.get_orders(env, power)
            seen.setdefault(tuple(sorted(orders)), orders)
        return list(seen.values())
