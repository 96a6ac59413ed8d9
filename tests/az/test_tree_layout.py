"""The tree's record layout and legal-action lists agree with its masks after real searches."""

from __future__ import annotations

import numpy as np

from leaguezero.az.evaluator import UniformEvaluator
from leaguezero.az.tree import NODE_EXPANDED, UNVISITED, add_node, allocate_tree, set_legal
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, new_matches
from leaguezero.yatzy.search.puct import make_search
from leaguezero.yatzy.search.settings import SearchSettings


def test_legal_lists_match_the_masks_of_every_expanded_node():
    games = 6
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64), DICE_RNG)
    search = make_search(UniformEvaluator(1, 47), SearchSettings(budget_reroll=40), max_games=games)
    for seed in range(2):  # the second search reuses the trees' memory
        search.run(states, np.arange(games) + 100 * seed)
        tree = search.tree
        checked = 0
        for g in range(games):
            for node in range(tree.num_nodes[g]):
                if tree.node_status[g, node] != NODE_EXPANDED:
                    continue
                count = tree.num_legal[g, node]
                expected = np.flatnonzero(tree.legal[g, node])
                np.testing.assert_array_equal(tree.legal_actions[g, node, :count], expected)
                assert tree.prior[g, node][~tree.legal[g, node]].sum() == 0
                checked += 1
        assert checked >= games


def test_tree_fields_are_views_of_one_record_per_node_and_edge():
    tree = allocate_tree(2, 3, 5)
    node = add_node(tree, 1, UNVISITED, UNVISITED, 0, 1, NODE_EXPANDED)
    set_legal(tree, 1, node, np.array([False, True, False, True, True]))
    tree.edge_visits[1, node, 3] = 7
    # Neighbouring fields of one edge share a record: a write to one leaves the others alone.
    assert tree.edge_value_sum[1, node, 3] == 0.0 and tree.prior[1, node, 3] == 0.0
    assert tree.edge_child[1, node, 3] == UNVISITED
    assert list(tree.legal_actions[1, node, : tree.num_legal[1, node]]) == [1, 3, 4]
    assert tree.edge_visits.base is tree.edge_value_sum.base  # one buffer for the edges
    assert tree.node_visits.base is tree.node_player.base  # and one for the nodes
