"""Search trees for many games at once: preallocated struct-of-arrays and the PUCT node kernels.

One :class:`Tree` holds ``G`` trees of at most ``N`` nodes each, every node with a dense row of
``A`` edges. Nodes are integer ids into those arrays (``ROOT_INDEX = 0``); an edge that has never
been taken points at ``UNVISITED``. Nothing here knows a game: a node stores only whose turn it is
(``node_player``, so values can change sign when the turn passes) and the chance ``node_key``
that led to it.

Chance (closed loop): taking action ``a`` at ``node`` may have a random outcome. The first child
of edge ``(node, a)`` is ``edge_child[g, node, a]``; further outcomes hang off it as a singly
linked list through ``node_sibling``. A descent samples an outcome, looks its key up in that list
and adds a node for an outcome it has not seen before. Edge statistics ``(N(s,a), W(s,a))`` are
kept on the edge, so ``Q(s,a)`` averages over the sampled outcomes in proportion to how often
each was drawn: a Monte-Carlo expectation over chance.

Values are stored from the point of view of the node's player; backup flips the sign wherever
``node_player`` differs from the leaf's player.

Every kernel works on one game ``g`` and allocates nothing.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

ROOT_INDEX = 0
UNVISITED = -1  # edge_child / node_sibling: no node there

# node_status values
NODE_PENDING = 0  # created, waiting for its evaluation (a leaf in flight)
NODE_EXPANDED = 1  # evaluated: priors and legal mask set, edges may be taken
NODE_TERMINAL = 2  # game over: valued by the game's outcome, never evaluated

# Columns of the per-game counters array (int64 [G, NUM_COUNTERS]).
C_SIMS = 0  # simulations completed (backed up) this search
C_PENDING = 1  # leaves currently waiting for evaluation
C_COLLISIONS = 2  # descents that ran into a pending leaf and were dropped
C_FALLBACKS = 3  # evaluations whose priors or value were degenerate (uniform / 0 used)
C_EVALS = 4  # leaves sent to the evaluator (root included)
C_DESCENTS = 5  # descents started (each gets its own chance stream)
C_TERMINAL = 6  # simulations that ended in a terminal node (no evaluation)
NUM_COUNTERS = 7


class Tree(NamedTuple):
    """``G`` search trees of capacity ``N`` nodes over ``A`` actions (all preallocated)."""

    node_status: np.ndarray  # [G, N] int8: NODE_PENDING | NODE_EXPANDED | NODE_TERMINAL
    node_player: np.ndarray  # [G, N] int8: player to move at the node
    node_parent: np.ndarray  # [G, N] int32: parent node id (UNVISITED at the root)
    node_action: np.ndarray  # [G, N] int32: action from the parent (UNVISITED at the root)
    node_key: np.ndarray  # [G, N] int64: chance outcome that produced the node
    node_sibling: np.ndarray  # [G, N] int32: next outcome of the same edge, or UNVISITED
    node_visits: np.ndarray  # [G, N] int32: backed-up visits (the node's own evaluation included)
    node_value_sum: np.ndarray  # [G, N] float64: sum of backed-up values, node player's view
    prior: np.ndarray  # [G, N, A] float32: policy priors (0 for illegal actions)
    legal: np.ndarray  # [G, N, A] bool: legal actions
    legal_actions: np.ndarray  # [G, N, A] int16: the legal actions in increasing order ...
    num_legal: np.ndarray  # [G, N] int16: ... of which the first num_legal are used
    edge_child: np.ndarray  # [G, N, A] int32: first child of the edge, or UNVISITED
    edge_visits: np.ndarray  # [G, N, A] int32: N(s, a)
    edge_value_sum: np.ndarray  # [G, N, A] float64: W(s, a), node player's view
    edge_pending: np.ndarray  # [G, N, A] int32: descents in flight through the edge
    num_nodes: np.ndarray  # [G] int32: nodes in use


# Memory layout: a descent reads a few fields of one node and of its legal edges, from trees far
# larger than the L2 cache (256 games x 66 nodes x 47 edges is ~20 MB). With one array per field,
# every field of an edge sat in a different cache line; here the fields of a node, and those of
# each of its edges, are interleaved records, so a node's edges are one contiguous block that the
# hardware prefetcher streams in. The Tree's fields stay plain (strided) ndarray views.
_NODE_RECORD = np.dtype(
    {
        "names": ["value_sum", "key", "parent", "action", "sibling", "visits", "num_legal",
                  "status", "player"],
        "formats": [np.float64, np.int64, np.int32, np.int32, np.int32, np.int32, np.int16,
                    np.int8, np.int8],
        "offsets": [0, 8, 16, 20, 24, 28, 32, 34, 35],
        "itemsize": 40,
    }
)  # fmt: skip
_EDGE_RECORD = np.dtype(
    {
        "names": ["value_sum", "prior", "visits", "pending", "child", "legal_action", "legal"],
        "formats": [np.float64, np.float32, np.int32, np.int32, np.int32, np.int16, np.bool_],
        "offsets": [0, 8, 12, 16, 20, 24, 26],
        "itemsize": 32,
    }
)


def allocate_tree(num_games: int, max_nodes: int, num_actions: int) -> Tree:
    """Allocate ``num_games`` empty trees of ``max_nodes`` nodes over ``num_actions`` actions."""
    nodes = np.zeros((num_games, max_nodes), _NODE_RECORD)
    edges = np.zeros((num_games, max_nodes, num_actions), _EDGE_RECORD)
    for field in ("parent", "action", "sibling"):
        nodes[field] = UNVISITED
    edges["child"] = UNVISITED
    return Tree(
        node_status=nodes["status"],
        node_player=nodes["player"],
        node_parent=nodes["parent"],
        node_action=nodes["action"],
        node_key=nodes["key"],
        node_sibling=nodes["sibling"],
        node_visits=nodes["visits"],
        node_value_sum=nodes["value_sum"],
        prior=edges["prior"],
        legal=edges["legal"],
        legal_actions=edges["legal_action"],
        num_legal=nodes["num_legal"],
        edge_child=edges["child"],
        edge_visits=edges["visits"],
        edge_value_sum=edges["value_sum"],
        edge_pending=edges["pending"],
        num_nodes=np.zeros(num_games, np.int32),
    )


@njit(cache=True, error_model="numpy")
def has_room(tree, g, new_nodes):
    """Whether tree ``g`` can take ``new_nodes`` more nodes."""
    return tree.num_nodes[g] + new_nodes <= tree.node_status.shape[1]


@njit(cache=True, error_model="numpy")
def add_node(tree, g, parent, action, key, player, status):
    """Append a node to tree ``g`` below edge ``(parent, action)``; returns its id.

    The root is added with ``parent = UNVISITED``. The caller makes sure the tree has room
    (:func:`has_room`): a ``raise`` in here would cost every call an atomic incref/decref of each
    tree array (numba cannot prune them across the raise path).
    """
    node = tree.num_nodes[g]
    tree.num_nodes[g] = node + 1
    tree.node_status[g, node] = status
    tree.node_player[g, node] = player
    tree.node_parent[g, node] = parent
    tree.node_action[g, node] = action
    tree.node_key[g, node] = key
    tree.node_visits[g, node] = 0
    tree.node_value_sum[g, node] = 0.0
    tree.num_legal[g, node] = 0
    for a in range(tree.prior.shape[2]):
        tree.prior[g, node, a] = 0.0
        tree.legal[g, node, a] = False
        tree.edge_child[g, node, a] = UNVISITED
        tree.edge_visits[g, node, a] = 0
        tree.edge_value_sum[g, node, a] = 0.0
        tree.edge_pending[g, node, a] = 0
    if parent == UNVISITED:
        tree.node_sibling[g, node] = UNVISITED
    else:
        # Prepend to the edge's outcome list: O(1), and the list order is creation order reversed.
        tree.node_sibling[g, node] = tree.edge_child[g, parent, action]
        tree.edge_child[g, parent, action] = node
    return node


@njit(cache=True, error_model="numpy")
def set_legal(tree, g, node, legal):
    """Set the legal actions of ``node`` from ``legal`` (bool [A]): the mask and its list."""
    count = 0
    for a in range(legal.shape[0]):
        tree.legal[g, node, a] = legal[a]
        if legal[a]:
            tree.legal_actions[g, node, count] = a
            count += 1
    tree.num_legal[g, node] = count


@njit(cache=True, error_model="numpy")
def find_child(tree, g, node, action, key):
    """The child of edge ``(node, action)`` reached by chance outcome ``key``, or UNVISITED."""
    child = tree.edge_child[g, node, action]
    while child != UNVISITED:
        if tree.node_key[g, child] == key:
            return child
        child = tree.node_sibling[g, child]
    return UNVISITED


@njit(cache=True, error_model="numpy")
def edge_stats(visits, value_sum, pending, virtual_loss):
    """(visits, value sum) of one edge as PUCT sees it: each of its ``pending`` descents in flight
    counts as a visit of value ``-virtual_loss`` when ``virtual_loss > 0``.

    Scalars in, scalars out, on purpose: a helper that takes the whole :class:`Tree` (15 arrays)
    and is called per action stops numba from optimising the caller's loop (commit 709b06e made
    ``puct_select`` 25x slower that way; ``benchmarks/search.py --quick`` guards it in CI).
    """
    if virtual_loss > 0.0:
        return float(visits + pending), value_sum - virtual_loss * pending
    return float(visits), value_sum


@njit(cache=True, error_model="numpy")
def puct_select(tree, g, node, c_puct, fpu_reduction, virtual_loss, normalize_q=False):
    """The action maximising ``Q(s,a) + c_puct * P(s,a) * sqrt(N_sum) / (1 + N(s,a))``.

    ``N_sum = 1 + sum_a N(s,a)`` (the 1 is the node's own evaluation, so the first descent
    already follows the priors). An edge never taken gets the node's own mean value less
    ``fpu_reduction`` (first-play urgency relative to the parent, as in Leela Zero and mctx's
    ``qtransform_by_parent_and_siblings``): a fixed FPU of 0 would let one positive first visit
    lock the search onto it whenever the position is good for the mover. With ``virtual_loss > 0``
    every descent in flight through an edge counts as a visit of value ``-virtual_loss``, which
    steers concurrent descents apart; ``virtual_loss = 0`` makes pending descents invisible.
    Ties go to the lowest action index, so search is deterministic given its inputs.

    ``normalize_q``: Q values (and the FPU value) are rescaled to [0, 1] by the minimum and
    maximum over the node's own mean value and its visited edges (MuZero's min-max
    normalisation in mctx's ``qtransform_by_parent_and_siblings`` form). Without it the
    exploration term must be tuned to the game's value scale: Yatzy moves differ by a few
    points, a few hundredths of a utility in [-1, 1], far below ``c_puct * P`` at low budgets,
    so visits would follow the priors whatever the values say.

    Only the node's legal actions are scanned (``legal_actions``, written by :func:`set_legal`).
    """
    # Arrays are indexed through ``tree`` and never bound to locals or sliced into row views:
    # either costs an atomic incref/decref pair per call that numba cannot prune across loops.
    num_legal = tree.num_legal[g, node]
    use_pending = virtual_loss > 0.0
    n_sum = 1.0
    for i in range(num_legal):
        a = tree.legal_actions[g, node, i]
        n_sum += tree.edge_visits[g, node, a]
        if use_pending:
            n_sum += tree.edge_pending[g, node, a]
    sqrt_n = math.sqrt(n_sum)
    node_visits = tree.node_visits[g, node]
    parent_q = tree.node_value_sum[g, node] / node_visits if node_visits > 0 else 0.0
    fpu_value = parent_q - fpu_reduction
    q_low = 0.0
    q_scale = 1.0
    if normalize_q:
        q_low = min(parent_q, fpu_value)
        q_high = parent_q
        for i in range(num_legal):
            a = tree.legal_actions[g, node, i]
            visits, value_sum = edge_stats(
                tree.edge_visits[g, node, a],
                tree.edge_value_sum[g, node, a],
                tree.edge_pending[g, node, a],
                virtual_loss,
            )
            if visits > 0:
                q = value_sum / visits
                q_low = min(q_low, q)
                q_high = max(q_high, q)
        q_scale = 1.0 / max(q_high - q_low, 1e-8)
    best_action = -1
    best_score = -np.inf
    # Legal actions are listed in increasing order, so ties still go to the lowest index.
    for i in range(num_legal):
        a = tree.legal_actions[g, node, i]
        visits, value_sum = edge_stats(
            tree.edge_visits[g, node, a],
            tree.edge_value_sum[g, node, a],
            tree.edge_pending[g, node, a],
            virtual_loss,
        )
        q = value_sum / visits if visits > 0 else fpu_value
        q = (q - q_low) * q_scale
        # float(): float32 storage, float64 arithmetic, with or without the JIT (NEP 50).
        score = q + c_puct * float(tree.prior[g, node, a]) * sqrt_n / (1.0 + visits)
        if score > best_score:
            best_score = score
            best_action = a
    return best_action


@njit(cache=True, error_model="numpy")
def add_pending(tree, g, path_nodes, path_actions, slot, depth, delta):
    """Add ``delta`` (+1 reserve, -1 release) to ``edge_pending`` along descent ``slot`` of ``g``.

    ``path_nodes`` int32 [G, K, >= depth + 1], ``path_actions`` int32 [G, K, >= depth]: each
    descent's nodes from the root and the action taken at each (the
    :class:`~leaguezero.az.search.Batch` arrays, indexed whole: row views would cost an atomic
    incref/decref pair per call).
    """
    for i in range(depth):
        tree.edge_pending[g, path_nodes[g, slot, i], path_actions[g, slot, i]] += delta


@njit(cache=True, error_model="numpy")
def backup(tree, g, path_nodes, path_actions, slot, depth, leaf_value):
    """Back ``leaf_value`` (leaf player's view) up descent ``slot`` of ``g``, ``depth`` edges long.

    ``path_nodes`` int32 [G, K, >= depth + 1] (``path_nodes[g, slot, depth]`` is the leaf),
    ``path_actions`` int32 [G, K, >= depth]. Each node and edge receives the value from its own
    player's view.
    """
    leaf_player = tree.node_player[g, path_nodes[g, slot, depth]]
    for i in range(depth, -1, -1):
        node = path_nodes[g, slot, i]
        value = leaf_value if tree.node_player[g, node] == leaf_player else -leaf_value
        tree.node_visits[g, node] += 1
        tree.node_value_sum[g, node] += value
        if i < depth:
            action = path_actions[g, slot, i]
            tree.edge_visits[g, node, action] += 1
            tree.edge_value_sum[g, node, action] += value


@njit(cache=True, error_model="numpy")
def sanitize_priors(priors, legal, out):
    """Copy ``priors`` (float32 [A]) renormalised over ``legal`` (bool [A]) into ``out``.

    Falls back to uniform over the legal actions when a legal prior is NaN, infinite or negative,
    or when they sum to 0; returns True in that case (the caller counts fallbacks).
    """
    total = 0.0
    bad = False
    for a in range(priors.shape[0]):
        if legal[a]:
            p = float(priors[a])
            if not math.isfinite(p) or p < 0.0:
                bad = True
            else:
                total += p
    if bad or not total > 0.0:
        n_legal = 0
        for a in range(priors.shape[0]):
            n_legal += legal[a]
        for a in range(priors.shape[0]):
            out[a] = 1.0 / n_legal if legal[a] else 0.0
        return True
    for a in range(priors.shape[0]):
        out[a] = float(priors[a]) / total if legal[a] else 0.0
    return False


@njit(cache=True, error_model="numpy")
def expand_backup(
    tree,
    counters,
    path_nodes,
    path_actions,
    path_depth,
    batch_game,
    batch_slot,
    num_rows,
    priors,
    values,
    legal,
    count_sims,
):
    """Expand every evaluated leaf of a batch and back its value up; release its reservation.

    ``counters`` int64 [G, NUM_COUNTERS]; ``path_nodes`` int32 [G, K, D + 1], ``path_actions``
    int32 [G, K, D], ``path_depth`` int32 [G, K] (slot ``k`` of game ``g`` holds one pending
    descent); ``batch_game`` / ``batch_slot`` int64 [R]: which slot each batch row belongs to;
    ``priors`` float32 [R, A], ``values`` float32 [R] (leaf player's view), ``legal`` bool [R, A].
    ``count_sims`` is False for the root evaluation, which is not a simulation.
    """
    for row in range(num_rows):
        g = batch_game[row]
        slot = batch_slot[row]
        depth = path_depth[g, slot]
        leaf = path_nodes[g, slot, depth]
        fallback = sanitize_priors(priors[row], legal[row], tree.prior[g, leaf])
        value = float(values[row])
        if not math.isfinite(value):
            value = 0.0
            fallback = True
        set_legal(tree, g, leaf, legal[row])
        tree.node_status[g, leaf] = NODE_EXPANDED
        add_pending(tree, g, path_nodes, path_actions, slot, depth, -1)
        backup(tree, g, path_nodes, path_actions, slot, depth, value)
        counters[g, C_PENDING] -= 1
        counters[g, C_EVALS] += 1
        counters[g, C_FALLBACKS] += fallback
        if count_sims:
            counters[g, C_SIMS] += 1


@njit(cache=True, error_model="numpy")
def root_visit_policy(tree, active, out):
    """Normalised root visit counts: ``out[g]`` (float32 [G, A]) for every active game.

    A root with no visited edge (budget 0) gets its priors instead.
    """
    for g in range(out.shape[0]):
        if not active[g]:
            continue
        total = 0
        for a in range(out.shape[1]):
            total += tree.edge_visits[g, ROOT_INDEX, a]
        for a in range(out.shape[1]):
            if total > 0:
                out[g, a] = tree.edge_visits[g, ROOT_INDEX, a] / total
            else:
                out[g, a] = tree.prior[g, ROOT_INDEX, a]
