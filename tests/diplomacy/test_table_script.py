"""scripts/figures/diplomacy_table.py's arithmetic: chunks pooled into one line, and the paired
difference taken game by game over the cells both agents have (no eval run here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "figures"


@pytest.fixture(scope="module")
def table():
    sys.path.insert(0, str(SCRIPTS))  # the script imports its sibling diplomacy_eval
    try:
        path = SCRIPTS / "diplomacy_table.py"
        spec = importlib.util.spec_from_file_location("diplomacy_table", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPTS))


def _cell(agent: str, seed: int, wins: list[float], se: float = 0.1) -> dict:
    n = len(wins)
    return {
        "agent": agent, "opponent": "dumb_bot", "years": 3, "games": n, "seed": seed,
        "win_rate": sum(wins) / n, "win_rate_se": se, "mean_centers": 5.0 + seed,
        "solo_rate": 0.0, "cpu_s_per_game": 2.0, "wins": wins,
    }  # fmt: skip


def test_chunks_pool_weighted_by_games(table):
    pooled = table.pool([_cell("a", 1, [1, 0, 0, 0]), _cell("a", 2, [1, 1], se=0.2)])
    assert pooled["games"] == 6
    assert pooled["win_rate"] == pytest.approx(3 / 6)
    assert pooled["mean_centers"] == pytest.approx((6.0 * 4 + 7.0 * 2) / 6)
    assert pooled["win_rate_se"] == pytest.approx(((0.1 * 4) ** 2 + (0.2 * 2) ** 2) ** 0.5 / 6)


def test_paired_difference_is_taken_game_by_game_over_shared_cells(table):
    rows = [
        _cell("a", 1, [1, 0, 1, 0]),
        _cell("b", 1, [0, 0, 1, 1]),
        _cell("a", 2, [1, 1]),
        _cell("b", 2, [0, 1]),
        _cell("a", 3, [1, 1]),  # b never played seed 3: left out
    ]
    (line,) = table.paired(rows, "a", "b")
    diffs = [1, 0, 0, -1, 1, 0]
    mean = sum(diffs) / 6
    se = (sum((d - mean) ** 2 for d in diffs) / 5 / 6) ** 0.5
    assert "6 games" in line and "seeds [1, 2]" in line
    assert f"{mean:+.3f} ± {se:.3f}" in line


def test_paired_centres_where_both_cells_recorded_them(table):
    a = _cell("a", 1, [1, 0, 0])
    b = _cell("b", 1, [0, 0, 1])
    a["centers"], b["centers"] = [7, 4, 3], [5, 4, 6]
    old = _cell("a", 2, [1, 0])  # a cell from before centres were recorded: wins only
    wins, centres = table.paired([a, b, old, _cell("b", 2, [0, 0])], "a", "b")
    assert "win share" in wins and "5 games" in wins
    diffs = [2, 0, -3]
    mean = sum(diffs) / 3
    se = (sum((d - mean) ** 2 for d in diffs) / 2 / 3) ** 0.5
    assert "supply centres" in centres and "3 games" in centres
    assert f"{mean:+.3f} SC ± {se:.3f} SC" in centres
