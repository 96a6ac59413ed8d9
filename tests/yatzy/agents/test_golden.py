"""The seeded playthrough golden: regenerate with
``python -m leaguezero.yatzy.agents.golden > tests/yatzy/golden/playthrough_seed0.txt``."""

from __future__ import annotations

from pathlib import Path

from leaguezero.yatzy.agents.golden import playthrough

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "playthrough_seed0.txt"


def test_seeded_playthrough_matches_the_golden():
    assert playthrough(0) == GOLDEN.read_text()


def test_another_seed_plays_another_game():
    assert playthrough(1) != GOLDEN.read_text()
