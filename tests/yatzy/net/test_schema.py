"""Each search kind's network record (yatzy/net/schema.py) and the layers that extend it."""

from __future__ import annotations

import pytest

from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.schema import (
    SEARCH_KINDS,
    checkpoint_schema,
    feature_schema_id,
    kind_of_schema,
    num_features,
)


def test_each_kind_reads_its_feature_schema_and_a_checkpoint_tells_its_kind() -> None:
    assert SEARCH_KINDS == ("turn", "puct")
    assert (feature_schema_id("turn"), num_features("turn")) == (
        TURN_FEATURE_SCHEMA_ID,
        NUM_TURN_FEATURES,
    )
    assert (feature_schema_id("puct"), num_features("puct")) == (FEATURE_SCHEMA_ID, NUM_FEATURES)
    for kind in SEARCH_KINDS:
        assert kind_of_schema(checkpoint_schema(kind).feature_schema_id) == kind
    with pytest.raises(ValueError, match="not a Yatzy network schema"):
        kind_of_schema(99)
    with pytest.raises(ValueError, match="unknown search kind 'mcts': use turn or puct"):
        checkpoint_schema("mcts")


def test_every_kind_has_an_agent_and_a_self_play() -> None:
    """The agents (agents/model.py) and the training records (train/kinds.py) extend the
    network records kind by kind: none may miss one."""
    from leaguezero.yatzy.agents.model import AGENT_OF_KIND
    from leaguezero.yatzy.train.kinds import KINDS, search_kind

    assert tuple(AGENT_OF_KIND) == SEARCH_KINDS
    assert tuple(KINDS) == SEARCH_KINDS
    for kind in SEARCH_KINDS:
        assert search_kind(kind).network.checkpoint_schema == checkpoint_schema(kind)
    with pytest.raises(ValueError, match="unknown search kind"):
        search_kind("mcts")
