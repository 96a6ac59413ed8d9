from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from leaguezero.league.matchmaker import cluster_seating


def test_spec_example_seven_seats_two_unique():
    seats = cluster_seating("Hero", ["A", "B"], 7, 2, random.Random(0), hero_seat=0)
    assert seats == ["Hero", "A", "A", "A", "B", "B", "B"]


def test_hero_seat_is_honoured_and_blocks_skip_it():
    seats = cluster_seating("H", ["A", "B", "C", "D"], 7, 2, random.Random(0), hero_seat=2)
    assert seats == ["A", "A", "H", "A", "B", "B", "B"]


def test_uneven_split_and_duplicates_in_draw():
    seats = cluster_seating("H", ["A", "A", "B", "C"], 7, 4, np.random.default_rng(1), 6)
    # 6 other seats over 3 unique opponents: 2 each.
    assert seats == ["A", "A", "B", "B", "C", "C", "H"]
    seats = cluster_seating("H", ["A", "B", "C", "D"], 7, 4, random.Random(0), hero_seat=0)
    assert seats == ["H", "A", "A", "B", "B", "C", "D"]


def test_two_player_game():
    assert cluster_seating("H", ["X", "Y"], 2, 3, random.Random(0), hero_seat=1) == ["X", "H"]


def test_random_hero_seat_covers_all_seats():
    rng = np.random.default_rng(0)
    counts = Counter(cluster_seating("H", ["A"], 7, 1, rng).index("H") for _ in range(700))
    assert set(counts) == set(range(7))
    assert min(counts.values()) > 60


def test_errors():
    with pytest.raises(ValueError, match="at least one opponent"):
        cluster_seating("H", [], 7, 2, random.Random(0))
    with pytest.raises(ValueError, match="outside"):
        cluster_seating("H", ["A"], 7, 2, random.Random(0), hero_seat=7)
    assert cluster_seating("H", [], 1, 2, random.Random(0)) == ["H"]
