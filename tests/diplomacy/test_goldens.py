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


def test_an_old_policy_plays_as_it_did_before_issue_53() -> None:
    """An old (schema 1, independent decoder) checkpoint, the shipped one until 2026-12-06,
    loads and samples the same orders with the same log-probs as when the golden was written."""
    from tests.diplomacy.goldens import PRETRAINED_ORDERS, pretrained_orders_transcript

    assert pretrained_orders_transcript() == PRETRAINED_ORDERS.read_text()


def test_the_shipped_policy_plays_as_its_golden_says() -> None:
    """Today's shipped ``pretrained`` (schema 2: sequential decoder, value head)."""
    from tests.diplomacy.goldens import SHIPPED_ORDERS, pretrained_orders_transcript, shipped_policy

    assert pretrained_orders_transcript(path=shipped_policy()) == SHIPPED_ORDERS.read_text()
