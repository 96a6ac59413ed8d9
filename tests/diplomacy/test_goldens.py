"""Fresh output equals the goldens.

Regenerate: ``PYTHONPATH=src python -m tests.diplomacy.goldens``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from tests.diplomacy.goldens import BOT_GAME, LOSS_CURVE, bot_game_transcript, grpo_loss_curve


def test_bot_game_transcript_matches_the_golden() -> None:
    assert bot_game_transcript() == BOT_GAME.read_text()


def test_grpo_loss_curve_matches_the_golden() -> None:
    assert grpo_loss_curve() == LOSS_CURVE.read_text()
