"""Lockstep PUCT search over many games with one batched evaluator (the game-agnostic driver).

Each round, the game's ``select`` kernel descends every active tree to up to
``max_inflight_per_game`` new leaves and writes their features and legal masks (and, for a game
that has them, their compact position rows) into one batch; the evaluator scores the whole
batch in one call (given the position rows when it takes them: the inference client, which
then sends a few ints a leaf instead of features and legal bits);
:func:`leaguezero.az.tree.expand_backup` expands the leaves and backs the values up. Rounds
repeat until every tree has spent its budget. Throughput therefore comes from many concurrent
games (one network call per round for all of them), not from many descents in one tree.

Games plug in through :class:`GameKernels` (three methods wrapping the game's numba kernels),
so this module imports no game. Yatzy's are in :mod:`leaguezero.yatzy.search.puct`.

Randomness: root Dirichlet noise (self-play only) and temperature sampling of the executed move
use a ``numpy`` generator owned by the search; chance inside the tree uses the game's own
per-descent streams seeded by ``root_seeds``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from leaguezero.az.evaluator import AsyncEvaluator, Evaluator, PositionEvaluator
from leaguezero.az.tree import (
    C_COLLISIONS,
    C_DESCENTS,
    C_EVALS,
    C_FALLBACKS,
    C_PENDING,
    C_SIMS,
    C_TERMINAL,
    NUM_COUNTERS,
    ROOT_INDEX,
    Tree,
    allocate_tree,
    expand_backup,
    root_visit_policy,
)


class Batch(NamedTuple):
    """Preallocated leaf batch and descent paths (slot ``k`` of game ``g`` = one descent)."""

    features: np.ndarray  # [G * K, F] float32: features of the leaves to evaluate
    legal: np.ndarray  # [G * K, A] bool: their legal actions
    batch_game: np.ndarray  # [G * K] int64: game of each row
    batch_slot: np.ndarray  # [G * K] int64: slot of each row
    path_nodes: np.ndarray  # [G, K, D + 1] int32: nodes of each pending descent
    path_actions: np.ndarray  # [G, K, D] int32: actions of each pending descent
    path_depth: np.ndarray  # [G, K] int32: edges in each pending descent
    positions: np.ndarray  # [G * K, W] int32: the leaves' compact position rows (W may be 0)


class GameKernels(Protocol):
    """What a game supplies to the driver: thin wrappers around its numba kernels.

    ``position_width`` > 0: ``begin`` and ``select`` also write each leaf's compact position
    row (``position_schema_id``'s layout, which a served model's position codec reads) into
    ``Batch.positions``; 0: the game has none.
    """

    num_features: int
    num_actions: int
    position_width: int
    position_schema_id: int

    def budgets(self, root_states: np.ndarray) -> np.ndarray:
        """Simulations per root (int64 [G]) for root states (game-specific [G, S])."""
        ...

    def begin(
        self,
        tree: Tree,
        counters: np.ndarray,
        batch: Batch,
        root_states: np.ndarray,
        active: np.ndarray,
    ) -> int:
        """Reset the trees, add the roots, write their features into the batch; returns rows."""
        ...

    def select(
        self,
        tree: Tree,
        counters: np.ndarray,
        batch: Batch,
        root_states: np.ndarray,
        root_seeds: np.ndarray,
        active: np.ndarray,
        budgets: np.ndarray,
        params: SearchParams,
    ) -> int:
        """Descend every active tree to new leaves (backing up terminal ones); returns rows."""
        ...


@dataclass(frozen=True)
class SearchParams:
    """PUCT knobs shared by every game. No defaults but ``fpu_reduction``: a game's config
    holds them, written once there (Yatzy: ``MctsSection``, handed down as ``SearchSettings``
    to ``make_search``)."""

    c_puct: float
    max_inflight_per_game: int
    virtual_loss: float  # 0 disables reservations (pending descents invisible)
    dirichlet_alpha: float
    dirichlet_epsilon: float
    normalize_q: bool  # min-max normalised Q in PUCT (see tree.puct_select)
    fpu_reduction: float = 0.0  # an edge never taken gets Q = parent's mean value - this


@dataclass
class SearchResult:
    """One search of ``G`` roots."""

    pi: np.ndarray  # [G, A] float32: normalised root visit counts (the training target)
    root_value: np.ndarray  # [G] float32: mean backed-up value at the root, mover's view
    actions: np.ndarray  # [G] int64: executed actions (temperature applied)
    raw_priors: np.ndarray  # [G, A] float32: root priors from the evaluator (sanitised)
    noisy_priors: np.ndarray  # [G, A] float32: root priors used by PUCT (after noise, if any)
    counters: np.ndarray  # [G, NUM_COUNTERS] int64: per-game counters (C_* columns)
    stats: dict[str, float] = field(default_factory=dict)


class LockstepSearch:
    """Runs PUCT searches for many games in lockstep with one :class:`Evaluator`.

    Trees hold ``max(budgets) + max_inflight_per_game + 1`` nodes (a simulation adds at most one
    node), so they are sized from ``max_budget`` once and reused for every search.
    """

    def __init__(
        self,
        game: GameKernels,
        evaluator: Evaluator,
        params: SearchParams,
        *,
        max_games: int,
        max_budget: int,
        seed: int = 0,
        pipeline: bool = True,
    ) -> None:
        if max_games < 1 or max_budget < 1:
            raise ValueError("max_games and max_budget must be at least 1")
        self.game = game
        self.evaluator = evaluator
        self.params = params
        self.max_budget = max_budget
        self.pipeline = pipeline  # two groups in flight with an AsyncEvaluator
        # Leaves go to the evaluator as position rows when both sides can (see _submit).
        self.send_positions = game.position_width > 0 and isinstance(evaluator, PositionEvaluator)
        self.rng = np.random.default_rng(seed)
        self._allocate(max_games)

    def _allocate(self, num_games: int) -> None:
        k = self.params.max_inflight_per_game
        nodes = self.max_budget + k + 1
        depth = nodes
        self.max_games = num_games
        self.tree = allocate_tree(num_games, nodes, self.game.num_actions)
        self.counters = np.zeros((num_games, NUM_COUNTERS), np.int64)
        path_nodes = np.zeros((num_games, k, depth + 1), np.int32)
        path_actions = np.zeros((num_games, k, depth), np.int32)
        path_depth = np.zeros((num_games, k), np.int32)
        # Two leaf batches over the same per-game paths: the pipelined loop fills one group's
        # batch while the other group's is at the evaluator (see _run_pipelined).
        self.batches = [
            Batch(
                features=np.zeros((num_games * k, self.game.num_features), np.float32),
                legal=np.zeros((num_games * k, self.game.num_actions), np.bool_),
                batch_game=np.zeros(num_games * k, np.int64),
                batch_slot=np.zeros(num_games * k, np.int64),
                path_nodes=path_nodes,
                path_actions=path_actions,
                path_depth=path_depth,
                positions=np.zeros((num_games * k, self.game.position_width), np.int32),
            )
            for _ in range(2)
        ]
        self.batch = self.batches[0]

    def _evaluate(self, rows: int, count_sims: bool) -> None:
        b = self.batch
        start = time.perf_counter()
        if self.send_positions:
            priors, values = self._submit(b, rows).result()
        else:
            priors, values = self.evaluator.evaluate(b.features[:rows], b.legal[:rows])
        self.evaluate_seconds += time.perf_counter() - start
        self._expand(b, rows, priors, values, count_sims)

    def _submit(self, b: Batch, rows: int):
        """The first ``rows`` leaves of ``b`` to an asynchronous evaluator: as position rows
        when it takes them (:class:`PositionEvaluator`), else as features and legal masks."""
        if self.send_positions:
            schema = self.game.position_schema_id
            return self.evaluator.evaluate_positions_async(b.positions[:rows], schema)
        return self.evaluator.evaluate_async(b.features[:rows], b.legal[:rows])

    def _expand(self, b: Batch, rows: int, priors, values, count_sims: bool) -> None:
        expand_backup(
            self.tree, self.counters, b.path_nodes, b.path_actions, b.path_depth,
            b.batch_game, b.batch_slot, rows,
            np.ascontiguousarray(priors, dtype=np.float32),
            np.ascontiguousarray(values, dtype=np.float32), b.legal, count_sims,
        )  # fmt: skip
        self.eval_calls += 1

    def _run_rounds(self, states, seeds, active, budgets, num_games: int) -> int:
        """Select, evaluate, expand until every tree has spent its budget; returns rounds."""
        rounds = 0
        while True:
            rows = self.game.select(self.tree, self.counters, self.batch, states, seeds, active,
                                    budgets, self.params)  # fmt: skip
            if rows == 0:
                # No leaf needs the evaluator: the first slot of a tree never collides, so every
                # tree has spent its budget (the last simulations ended in terminal nodes).
                break
            self._evaluate(rows, count_sims=True)
            rounds += 1
            if (self.counters[:num_games, C_SIMS] >= budgets[:num_games]).all():
                break
        return rounds

    def _run_pipelined(self, states, seeds, active, budgets) -> int:
        """:meth:`_run_rounds` with two groups of games, one at the evaluator while the other
        selects and expands (double buffering); returns rounds (of either group).

        Each game's sequence of select, evaluate, expand is the one of :meth:`_run_rounds`
        (games never share a leaf batch with a game of the other group), so a search gives the
        same trees either way. Used when the evaluator is an
        :class:`~leaguezero.az.evaluator.AsyncEvaluator` (the inference client): the server's
        forward then overlaps with this process's tree work.
        ``evaluate_seconds`` counts only the time spent waiting for replies.
        """
        groups = [active & (np.arange(active.size) % 2 == parity) for parity in (0, 1)]
        in_flight: list = [None, None]  # (pending evaluation, rows) per group

        def send(i: int) -> None:
            b = self.batches[i]
            rows = self.game.select(self.tree, self.counters, b, states, seeds, groups[i],
                                    budgets, self.params)  # fmt: skip
            in_flight[i] = (self._submit(b, rows), rows) if rows else None

        rounds = 0
        send(0)
        send(1)
        while in_flight[0] is not None or in_flight[1] is not None:
            for i in (0, 1):
                if in_flight[i] is None:
                    continue
                pending, rows = in_flight[i]
                start = time.perf_counter()
                priors, values = pending.result()
                self.evaluate_seconds += time.perf_counter() - start
                self._expand(self.batches[i], rows, priors, values, count_sims=True)
                rounds += 1
                group = groups[i]
                if (self.counters[group, C_SIMS] >= budgets[group]).all():
                    in_flight[i] = None
                else:
                    send(i)
        return rounds

    def run(
        self,
        root_states: np.ndarray,
        root_seeds: np.ndarray,
        *,
        add_noise: bool = False,
        temperature: float | np.ndarray = 0.0,
    ) -> SearchResult:
        """Search every root and choose the executed moves.

        ``root_states``: [G, S] game states (none terminal); ``root_seeds``: int64 [G] seeds of
        the in-tree chance streams (equal seeds and states give equal searches);
        ``add_noise``: mix Dirichlet noise into the root priors (self-play only);
        ``temperature``: scalar or float [G]; 0 plays the most visited move (lowest index on
        ties), ``T > 0`` samples in proportion to ``visits ** (1 / T)``. Targets (``pi``) are
        always the plain normalised visit counts.
        """
        num_games = root_states.shape[0]
        if num_games > self.max_games:
            self._allocate(num_games)
        tree, counters, batch = self.tree, self.counters, self.batch
        active = np.zeros(self.max_games, np.bool_)
        active[:num_games] = True
        states = np.zeros((self.max_games, root_states.shape[1]), root_states.dtype)
        states[:num_games] = root_states
        seeds = np.zeros(self.max_games, np.int64)
        seeds[:num_games] = root_seeds
        budgets = np.zeros(self.max_games, np.int64)
        budgets[:num_games] = self.game.budgets(root_states)
        if budgets.max() > self.max_budget:
            raise ValueError(f"budget {budgets.max()} exceeds max_budget {self.max_budget}")
        self.evaluate_seconds = 0.0
        self.eval_calls = 0
        start = time.perf_counter()

        rows = self.game.begin(tree, counters, batch, states, active)
        self._evaluate(rows, count_sims=False)
        raw = tree.prior[:num_games, ROOT_INDEX].copy()
        if add_noise and self.params.dirichlet_epsilon > 0:
            self._add_root_noise(num_games)
        noisy = tree.prior[:num_games, ROOT_INDEX].copy()

        can_pipeline = self.send_positions or isinstance(self.evaluator, AsyncEvaluator)
        if self.pipeline and num_games >= 2 and can_pipeline:
            rounds = self._run_pipelined(states, seeds, active, budgets)
        else:
            rounds = self._run_rounds(states, seeds, active, budgets, num_games)

        pi = np.zeros((self.max_games, self.game.num_actions), np.float32)
        root_visit_policy(tree, active, pi)
        pi = pi[:num_games]
        visits = tree.node_visits[:num_games, ROOT_INDEX]
        root_value = (tree.node_value_sum[:num_games, ROOT_INDEX] / visits).astype(np.float32)
        actions = self._choose(pi, np.broadcast_to(np.asarray(temperature, np.float64),
                                                   (num_games,)))  # fmt: skip
        c = counters[:num_games].copy()
        stats = {
            "games": float(num_games),
            "sims": float(c[:, C_SIMS].sum()),
            "evals": float(c[:, C_EVALS].sum()),
            "fallbacks": float(c[:, C_FALLBACKS].sum()),
            "collisions": float(c[:, C_COLLISIONS].sum()),
            "terminal_sims": float(c[:, C_TERMINAL].sum()),
            "descents": float(c[:, C_DESCENTS].sum()),
            "rounds": float(rounds),
            "eval_calls": float(self.eval_calls),
            "pi_entropy_mean": float(_entropy(pi).mean()),
            "pi_max_mean": float(pi.max(axis=1).mean()),
            "seconds": time.perf_counter() - start,
            "evaluate_seconds": self.evaluate_seconds,
        }
        if (c[:, C_SIMS] < budgets[:num_games]).any() or (c[:, C_PENDING] != 0).any():
            raise RuntimeError("search ended with simulations unspent or leaves pending")
        return SearchResult(pi, root_value, actions, raw, noisy, c, stats)

    def _add_root_noise(self, num_games: int) -> None:
        """``P = (1 - eps) P + eps Dir(alpha)`` over each root's legal actions."""
        legal = self.tree.legal[:num_games, ROOT_INDEX]
        gamma = self.rng.standard_gamma(self.params.dirichlet_alpha, size=legal.shape) * legal
        total = gamma.sum(axis=1, keepdims=True)
        noise = np.divide(gamma, total, out=np.zeros_like(gamma), where=total > 0)
        eps = self.params.dirichlet_epsilon
        prior = self.tree.prior[:num_games, ROOT_INDEX]
        self.tree.prior[:num_games, ROOT_INDEX] = ((1 - eps) * prior + eps * noise).astype(
            np.float32
        )

    def _choose(self, pi: np.ndarray, temperature: np.ndarray) -> np.ndarray:
        actions = np.argmax(pi, axis=1).astype(np.int64)  # first maximum: deterministic ties
        hot = np.flatnonzero(temperature > 0)
        if hot.size:
            # Sample every hot row at once: weights = pi ** (1 / T), inverse-CDF with one uniform
            # per row (a per-row rng.choice loop cost as much as a simulation round).
            p = pi[hot].astype(np.float64)
            logits = np.log(np.maximum(p, 1e-300)) / temperature[hot, None]
            weights = np.where(p > 0, np.exp(logits - logits.max(axis=1, keepdims=True)), 0.0)
            cdf = np.cumsum(weights, axis=1)
            u = self.rng.random(hot.size) * cdf[:, -1]
            picked = (cdf <= u[:, None]).sum(axis=1)
            # Never land on a zero-weight action through rounding at the top end.
            actions[hot] = np.minimum(picked, pi.shape[1] - 1)
            zero = weights[np.arange(hot.size), actions[hot]] == 0
            actions[hot[zero]] = np.argmax(pi[hot[zero]], axis=1)
        return actions


def _entropy(pi: np.ndarray) -> np.ndarray:
    p = pi.astype(np.float64)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1)
