"""PUCT kernels of ``az/tree.py``: known answers on bandits and comparisons with the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leaguezero.az.reference_puct import EXPANDED, Node, ReferencePUCT
from leaguezero.az.tree import (
    NODE_EXPANDED,
    NODE_TERMINAL,
    UNVISITED,
    add_node,
    allocate_tree,
    backup,
    find_child,
    puct_select,
    sanitize_priors,
    set_legal,
)


def run_bandit(priors, values, sims, c_puct, fpu_reduction=0.0, normalize_q=False):
    """PUCT on a one-level tree whose arm ``a`` always returns ``values[a]``; root visits [A]."""
    num_actions = len(priors)
    tree = allocate_tree(1, sims + 2, num_actions)
    root = add_node(tree, 0, UNVISITED, UNVISITED, 0, 0, NODE_EXPANDED)
    tree.prior[0, root] = priors
    set_legal(tree, 0, root, np.ones(num_actions, np.bool_))
    nodes = np.zeros((1, 1, 2), np.int32)  # [G, K, D + 1]: one game, one descent slot
    actions = np.zeros((1, 1, 1), np.int32)
    for _ in range(sims):
        a = puct_select(tree, 0, root, c_puct, fpu_reduction, 1.0, normalize_q)
        child = find_child(tree, 0, root, a, 0)
        if child == UNVISITED:
            child = add_node(tree, 0, root, a, 0, 0, NODE_TERMINAL)
        nodes[0, 0, 0], nodes[0, 0, 1], actions[0, 0, 0] = root, child, a
        backup(tree, 0, nodes, actions, 0, 1, values[a])
    return tree.edge_visits[0, root].copy()


def puct_fixed_point(priors, values, sims, c_puct):
    """Continuous visit counts where every arm's PUCT score equals one level ``lam``.

    ``Q_a + c P_a sqrt(1 + n) / (1 + N_a) = lam`` with ``sum N_a = n`` (bisection on lam).
    """
    priors, values = np.asarray(priors, float), np.asarray(values, float)
    scale = c_puct * priors * math.sqrt(1 + sims)

    def counts(lam):
        return np.maximum(scale / (lam - values) - 1.0, 0.0)

    lo, hi = values.max() + 1e-12, values.max() + scale.sum() + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if counts(mid).sum() > sims else (lo, mid)
    return counts((lo + hi) / 2)


def test_equal_values_give_visits_in_proportion_to_priors():
    priors = np.array([0.5, 0.25, 0.15, 0.1], np.float32)
    visits = run_bandit(priors, np.zeros(4), sims=996, c_puct=1.5)
    # Ties of P_a / (1 + N_a) keep 1 + N_a proportional to P_a: 1 + N_a = P_a * (n + A).
    np.testing.assert_allclose(visits, priors * 1000 - 1, atol=1.0)


@pytest.mark.parametrize("c_puct", [0.5, 1.5, 4.0])
def test_fixed_values_give_the_puct_fixed_point(c_puct):
    priors = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    values = np.array([0.1, 0.5, -0.2, 0.3])
    visits = run_bandit(priors, values, sims=3000, c_puct=c_puct)
    expected = puct_fixed_point(priors, values, 3000, c_puct)
    assert visits.sum() == 3000
    np.testing.assert_allclose(visits, expected, atol=2.0)
    assert np.argmax(visits) == 1  # the best arm, although its prior is not the largest


def test_backup_flips_the_sign_where_the_turn_passes():
    tree = allocate_tree(1, 4, 2)
    root = add_node(tree, 0, UNVISITED, UNVISITED, 0, 0, NODE_EXPANDED)
    mid = add_node(tree, 0, root, 1, 7, 0, NODE_EXPANDED)  # same player (a keep)
    leaf = add_node(tree, 0, mid, 0, 3, 1, NODE_EXPANDED)  # the opponent's turn (a mark)
    nodes = np.array([[[root, mid, leaf]]], np.int32)
    backup(tree, 0, nodes, np.array([[[1, 0]]], np.int32), 0, 2, 0.5)
    assert tree.node_value_sum[0, leaf] == 0.5
    assert tree.node_value_sum[0, mid] == -0.5 and tree.edge_value_sum[0, mid, 0] == -0.5
    assert tree.edge_value_sum[0, root, 1] == -0.5
    assert tree.edge_visits[0, root, 1] == 1 and tree.node_visits[0, root] == 1
    assert find_child(tree, 0, root, 1, 7) == mid and find_child(tree, 0, root, 1, 8) == UNVISITED


def test_ties_go_to_the_lowest_legal_action():
    tree = allocate_tree(1, 1, 5)
    add_node(tree, 0, UNVISITED, UNVISITED, 0, 0, NODE_EXPANDED)
    set_legal(tree, 0, 0, np.arange(5) >= 2)
    tree.prior[0, 0, 2:] = 1 / 3
    assert puct_select(tree, 0, 0, 1.5, 0.0, 1.0) == 2


def _random_node(rng, num_actions):
    legal = rng.random(num_actions) < 0.6
    legal[rng.integers(num_actions)] = True
    prior = np.where(legal, rng.random(num_actions), 0).astype(np.float32)
    visits = np.where(legal & (rng.random(num_actions) < 0.7), rng.integers(0, 9, num_actions), 0)
    value_sum = visits * rng.uniform(-1, 1, num_actions)
    pending = np.where(legal, rng.integers(0, 3, num_actions), 0)
    return legal, prior, visits, value_sum, pending


@pytest.mark.parametrize("virtual_loss", [0.0, 1.0, 0.3])
def test_puct_select_matches_the_reference_on_random_nodes(virtual_loss):
    rng = np.random.default_rng(0)
    num_actions = 12
    tree = allocate_tree(1, 1, num_actions)
    add_node(tree, 0, UNVISITED, UNVISITED, 0, 0, NODE_EXPANDED)
    reference = ReferencePUCT(None, None, c_puct=1.3, fpu_reduction=-0.1, virtual_loss=virtual_loss)
    reference.game = type("G", (), {"num_actions": num_actions})()
    for _ in range(300):
        legal, prior, visits, value_sum, pending = _random_node(rng, num_actions)
        set_legal(tree, 0, 0, legal)
        tree.prior[0, 0] = prior
        tree.edge_visits[0, 0], tree.edge_value_sum[0, 0] = visits, value_sum
        tree.edge_pending[0, 0] = pending
        tree.node_visits[0, 0] = visits.sum() + 1
        tree.node_value_sum[0, 0] = -value_sum.sum() + rng.uniform(-1, 1)
        node = Node(player=0, status=EXPANDED, prior=[float(p) for p in prior], legal=list(legal))
        node.edge_visits = {a: int(v) for a, v in enumerate(visits)}
        node.edge_value = {a: float(w) for a, w in enumerate(value_sum)}
        node.edge_pending = {a: int(p) for a, p in enumerate(pending)}
        node.visits = int(tree.node_visits[0, 0])
        node.value_sum = float(tree.node_value_sum[0, 0])
        assert puct_select(tree, 0, 0, 1.3, -0.1, virtual_loss) == reference.select(node)


def test_sanitize_priors_matches_the_reference_on_random_rows():
    rng = np.random.default_rng(1)
    reference = ReferencePUCT(None, None)
    out = np.zeros(10, np.float32)
    fallbacks = 0
    for i in range(400):
        legal = rng.random(10) < 0.5
        legal[rng.integers(10)] = True
        prior = rng.random(10).astype(np.float32)
        kind = i % 5
        if kind == 1:
            prior[rng.integers(10)] = np.nan
        elif kind == 2:
            prior[:] = 0
        elif kind == 3:
            prior[rng.integers(10)] = -0.5
        node = Node(player=0, status=0)
        expected_fallback = reference.expand(node, prior, legal)
        assert sanitize_priors(prior, legal, out) == expected_fallback
        np.testing.assert_array_equal(out, np.array(node.prior, np.float32))
        fallbacks += expected_fallback
    assert 0 < fallbacks < 400


def test_temperature_sampling_follows_visit_powers():
    """``_choose``: T = 1 samples in proportion to visits, T = 0.5 to visits squared, 0 = argmax."""
    from leaguezero.az.search import LockstepSearch

    chooser = LockstepSearch.__new__(LockstepSearch)  # only the rng is needed by _choose
    chooser.rng = np.random.default_rng(0)
    pi = np.tile(np.array([0.5, 0.0, 0.3, 0.2], np.float32), (20000, 1))
    for temperature, expected in [
        (1.0, [0.5, 0.0, 0.3, 0.2]),
        (0.5, [25 / 38, 0.0, 9 / 38, 4 / 38]),
    ]:
        actions = chooser._choose(pi, np.full(len(pi), temperature))
        freq = np.bincount(actions, minlength=4) / len(actions)
        np.testing.assert_allclose(freq, expected, atol=0.015)
    assert (chooser._choose(pi, np.zeros(len(pi))) == 0).all()


def test_normalised_q_ignores_the_value_scale():
    """Min-max normalised Q: any positive affine map of the values gives the same visits, and
    small value differences steer the search as much as large ones (unlike raw Q)."""
    priors = np.array([0.4, 0.3, 0.2, 0.1])
    values = np.array([-0.2, 0.1, 0.6, 0.3])
    base = run_bandit(priors, values, 400, 1.25, normalize_q=True)
    for scale, shift in ((0.01, 0.0), (0.05, -0.3), (3.0, 0.5)):
        scaled = run_bandit(priors, scale * values + shift, 400, 1.25, normalize_q=True)
        np.testing.assert_array_equal(scaled, base)
    assert base.argmax() == 2
    # Raw Q at a tiny scale: visits follow the priors, the best arm (prior 0.2) is not the most
    # visited; normalised, it takes most of the visits.
    raw = run_bandit(priors, 0.01 * values, 400, 1.25)
    assert raw.argmax() == 0
    assert base[2] > 0.5 * base.sum()
