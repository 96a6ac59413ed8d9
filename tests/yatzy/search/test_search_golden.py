"""A small search tree from the deterministic PointsEvaluator, compared with a reviewed golden.

Regenerate (only in a commit that says why the tree changed):
    LEAGUEZERO_REGEN_GOLDEN=1 python -m pytest tests/yatzy/search/test_search_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from leaguezero.az.tree import ROOT_INDEX, UNVISITED
from leaguezero.yatzy.game.rules import DICE_KEYED, S_DICE, S_REROLLS, STATE_LEN, new_match
from leaguezero.yatzy.game.tables import DICE, action_label
from leaguezero.yatzy.oracle.evaluator import PointsEvaluator
from leaguezero.yatzy.search.puct import TERMINAL_KEY, make_search
from leaguezero.yatzy.search.settings import SearchSettings

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "search_tree_small.txt"
STATUS = {0: "pending", 1: "expanded", 2: "terminal"}


def tree_text(search, root_state: np.ndarray) -> str:
    """Every node (id order) with its incoming action, outcome, stats and its visited edges."""
    tree = search.tree
    lines = [
        "# PUCT tree: PointsEvaluator, c_puct 1.5, budget_reroll 16, root seed 3",  # raw Q
        f"# root: dice {DICE[root_state[S_DICE]].tolist()}, rerolls_left {root_state[S_REROLLS]}",
    ]
    for node in range(tree.num_nodes[0]):
        parent = tree.node_parent[0, node]
        key = tree.node_key[0, node]
        outcome = "end" if key == TERMINAL_KEY else str(DICE[key].tolist())
        head = "root" if parent == UNVISITED else (
            f"parent {parent} action {tree.node_action[0, node]:2d} -> dice {outcome}"
        )  # fmt: skip
        visits = tree.node_visits[0, node]
        value = tree.node_value_sum[0, node] / max(visits, 1)
        lines.append(
            f"node {node}: {head}; player {tree.node_player[0, node]} "
            f"{STATUS[int(tree.node_status[0, node])]} N={visits} V={value:+.5f}"
        )
        for a in np.flatnonzero(tree.edge_visits[0, node]):
            n = tree.edge_visits[0, node, a]
            q = tree.edge_value_sum[0, node, a] / n
            lines.append(
                f"    {action_label(int(a)):<20} N={n} Q={q:+.5f} P={tree.prior[0, node, a]:.5f}"
            )
    return "\n".join(lines) + "\n"


def test_small_tree_matches_golden():
    state = np.zeros(STATE_LEN, np.int64)
    new_match(state, 7, DICE_KEYED)
    search = make_search(
        PointsEvaluator(),
        SearchSettings(budget_reroll=16, c_puct=1.5, margin_utility=1.0, normalize_q=False),
        max_games=1,
    )
    result = search.run(state[None], np.array([3], np.int64))
    text = tree_text(search, state)
    if os.environ.get("LEAGUEZERO_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert result.pi[0].argmax() == np.argmax(search.tree.edge_visits[0, ROOT_INDEX])
