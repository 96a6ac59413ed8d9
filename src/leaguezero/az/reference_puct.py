"""A slow, obvious PUCT with closed-loop chance: one Python object per node, one game at a time.

It is the reference the numba kernels are checked against (same descent order, same
arithmetic, so equal trees) and the baseline of ``benchmarks/search.py``. Nothing here is tuned.
The game comes in as a small object with plain-Python methods (:class:`ReferenceGame`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from leaguezero.az.evaluator import Evaluator

PENDING, EXPANDED, TERMINAL = 0, 1, 2


class ReferenceGame(Protocol):
    num_actions: int

    def descent_state(self, root_state: np.ndarray, root_seed: int, descent: int) -> np.ndarray:
        """A fresh copy of the root with its own chance stream for descent ``descent``."""
        ...

    def apply(self, state: np.ndarray, action: int) -> None: ...
    def chance_key(self, state: np.ndarray) -> int: ...
    def is_terminal(self, state: np.ndarray) -> bool: ...
    def player(self, state: np.ndarray) -> int: ...
    def terminal_value(self, state: np.ndarray, player: int) -> float: ...
    def encode(self, state: np.ndarray) -> np.ndarray: ...
    def legal(self, state: np.ndarray) -> np.ndarray: ...


@dataclass
class Node:
    player: int
    status: int
    prior: list[float] = field(default_factory=list)
    legal: list[bool] = field(default_factory=list)
    children: dict[int, dict[int, Node]] = field(default_factory=dict)  # action -> key -> node
    edge_visits: dict[int, int] = field(default_factory=dict)
    edge_value: dict[int, float] = field(default_factory=dict)
    edge_pending: dict[int, int] = field(default_factory=dict)
    visits: int = 0
    value_sum: float = 0.0


@dataclass
class ReferenceResult:
    root: Node
    visits: np.ndarray  # [A] int64 root edge visits
    root_value: float
    collisions: int
    fallbacks: int


class ReferencePUCT:
    """The same algorithm as :mod:`leaguezero.az.tree` + :mod:`leaguezero.az.search`, slowly."""

    def __init__(
        self,
        game: ReferenceGame,
        evaluator: Evaluator,
        *,
        c_puct: float = 1.5,
        fpu_reduction: float = 0.0,
        max_inflight: int = 1,
        virtual_loss: float = 1.0,
        normalize_q: bool = False,
    ) -> None:
        self.game = game
        self.normalize_q = normalize_q
        self.evaluator = evaluator
        self.c_puct = c_puct
        self.fpu_reduction = fpu_reduction
        self.max_inflight = max_inflight
        self.virtual_loss = virtual_loss

    def _edge(self, node: Node, a: int) -> tuple[float, float]:
        visits = float(node.edge_visits.get(a, 0))
        value_sum = node.edge_value.get(a, 0.0)
        if self.virtual_loss > 0:
            pending = node.edge_pending.get(a, 0)
            visits += pending
            value_sum -= self.virtual_loss * pending
        return visits, value_sum

    def select(self, node: Node) -> int:
        use_pending = self.virtual_loss > 0
        legal = [a for a in range(self.game.num_actions) if node.legal[a]]
        n_sum = 1.0
        for a in legal:
            n_sum += node.edge_visits.get(a, 0)
            if use_pending:
                n_sum += node.edge_pending.get(a, 0)
        sqrt_n = math.sqrt(n_sum)
        parent_q = node.value_sum / node.visits if node.visits > 0 else 0.0
        fpu_value = parent_q - self.fpu_reduction
        edges = {a: self._edge(node, a) for a in legal}  # (visits, value sum)
        q_low, q_scale = 0.0, 1.0
        if self.normalize_q:  # min-max over the node's value and its visited edges
            visited = [v / n for n, v in edges.values() if n > 0]
            q_low = min([parent_q, fpu_value, *visited])
            q_scale = 1.0 / max(max([parent_q, *visited]) - q_low, 1e-8)
        best, best_score = -1, -math.inf
        for a in legal:
            visits, value_sum = edges[a]
            q = value_sum / visits if visits > 0 else fpu_value
            q = (q - q_low) * q_scale
            score = q + self.c_puct * node.prior[a] * sqrt_n / (1.0 + visits)
            if score > best_score:
                best, best_score = a, score
        return best

    @staticmethod
    def backup(path: list[tuple[Node, int]], leaf: Node, value: float) -> None:
        leaf.visits += 1
        leaf.value_sum += value
        for node, action in reversed(path):
            v = value if node.player == leaf.player else -value
            node.visits += 1
            node.value_sum += v
            node.edge_visits[action] = node.edge_visits.get(action, 0) + 1
            node.edge_value[action] = node.edge_value.get(action, 0.0) + v

    def expand(self, node: Node, prior: np.ndarray, legal: np.ndarray) -> bool:
        """Set priors (renormalised, or uniform if degenerate); True on fallback."""
        legal_list = [bool(x) for x in legal]
        values = [float(p) for p, ok in zip(prior, legal_list, strict=True) if ok]
        bad = any(not math.isfinite(p) or p < 0 for p in values)
        total = 0.0
        for p in values:
            total += p
        n_legal = sum(legal_list)
        fallback = bad or not total > 0
        node.prior = [
            float(np.float32((1.0 / n_legal) if fallback else float(p) / total)) if ok else 0.0
            for p, ok in zip(prior, legal_list, strict=True)
        ]
        node.legal = legal_list
        node.status = EXPANDED
        return fallback

    def search(self, root_state: np.ndarray, root_seed: int, budget: int) -> ReferenceResult:
        game = self.game
        root = Node(player=game.player(root_state), status=PENDING)
        prior, value = self.evaluator.evaluate(
            game.encode(root_state)[None], game.legal(root_state)[None]
        )
        fallbacks = int(self.expand(root, prior[0], game.legal(root_state)))
        root_value = float(value[0]) if math.isfinite(float(value[0])) else 0.0
        self.backup([], root, root_value)
        sims = descents = collisions = 0
        while sims < budget:
            leaves = []
            while len(leaves) < self.max_inflight and sims + len(leaves) < budget:
                state = game.descent_state(root_state, root_seed, descents)
                descents += 1
                path: list[tuple[Node, int]] = []
                node, is_new = root, False
                while node.status == EXPANDED:
                    action = self.select(node)
                    game.apply(state, action)
                    key = game.chance_key(state)
                    child = node.children.setdefault(action, {}).get(key)
                    if child is None:
                        status = TERMINAL if game.is_terminal(state) else PENDING
                        child = Node(player=game.player(state), status=status)
                        node.children[action][key] = child
                        is_new = True
                    path.append((node, action))
                    node = child
                    if is_new:
                        break
                if node.status == TERMINAL:
                    self.backup(path, node, game.terminal_value(state, node.player))
                    sims += 1
                    continue
                if not is_new:
                    collisions += 1
                    break
                for parent, action in path:
                    parent.edge_pending[action] = parent.edge_pending.get(action, 0) + 1
                leaves.append((path, node, game.encode(state), game.legal(state)))
            if not leaves:
                break
            features = np.stack([leaf[2] for leaf in leaves])
            legal = np.stack([leaf[3] for leaf in leaves])
            priors, values = self.evaluator.evaluate(features, legal)
            for row, (path, node, _, leaf_legal) in enumerate(leaves):
                fallback = self.expand(node, priors[row], leaf_legal)
                value = float(values[row])
                if not math.isfinite(value):
                    value, fallback = 0.0, True
                fallbacks += fallback
                for parent, action in path:
                    parent.edge_pending[action] -= 1
                self.backup(path, node, value)
                sims += 1
        visits = np.array(
            [root.edge_visits.get(a, 0) for a in range(game.num_actions)], dtype=np.int64
        )
        return ReferenceResult(root, visits, root.value_sum / root.visits, collisions, fallbacks)
