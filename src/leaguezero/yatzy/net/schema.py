"""What a network of each search kind (``search.kind``) reads: one frozen
:class:`NetworkKind` record per kind.

``puct`` (the PUCT search with chance nodes, docs/reference/search.md) plays a network on
feature schema 1 (positions with dice, policy and value heads); ``turn``
(docs/reference/turn_search.md) one on feature schema 2 (turn starts, value heads only). The
kind decides the network's input width and the schema ids its checkpoints carry; a checkpoint's
feature schema tells which kind it plays (:func:`kind_of_schema`). What the kind decides for
training (replay shards, the self-play hero) is :mod:`leaguezero.yatzy.train.kinds`; which agent
plays a checkpoint of each kind is :mod:`leaguezero.yatzy.agents.model`.
"""

from __future__ import annotations

from dataclasses import dataclass

from leaguezero.az.checkpoint import SchemaIds
from leaguezero.yatzy.config import network_arch
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, RULESET_ID
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net


@dataclass(frozen=True)
class NetworkKind:
    """The network of one search kind: ``feature_schema_id`` / ``num_features``, what it
    reads."""

    name: str
    feature_schema_id: int
    num_features: int

    @property
    def checkpoint_schema(self) -> SchemaIds:
        """The schema ids a checkpoint of this kind carries (checked on every load)."""
        return SchemaIds(self.feature_schema_id, ACTION_SPACE_ID, RULESET_ID)


TURN_NETWORK = NetworkKind("turn", TURN_FEATURE_SCHEMA_ID, NUM_TURN_FEATURES)
PUCT_NETWORK = NetworkKind("puct", FEATURE_SCHEMA_ID, NUM_FEATURES)
NETWORK_KINDS: dict[str, NetworkKind] = {k.name: k for k in (TURN_NETWORK, PUCT_NETWORK)}
SEARCH_KINDS = tuple(NETWORK_KINDS)


def network_kind(kind: str) -> NetworkKind:
    """The record of ``kind``; ValueError naming the known kinds otherwise."""
    try:
        return NETWORK_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown search kind {kind!r}: use {' or '.join(SEARCH_KINDS)}") from None


def feature_schema_id(kind: str) -> int:
    """The feature schema id a ``kind`` network reads."""
    return network_kind(kind).feature_schema_id


def num_features(kind: str) -> int:
    """The input width F of a ``kind`` network."""
    return network_kind(kind).num_features


def checkpoint_schema(kind: str) -> SchemaIds:
    """The schema ids a ``kind`` checkpoint carries (checked on every load)."""
    return network_kind(kind).checkpoint_schema


def build_network(cfg, seed: int = 0):
    """A freshly initialised network for ``cfg.search.kind`` and ``cfg.model``
    (:func:`leaguezero.yatzy.config.network_arch` resolves ``arch: auto``)."""
    kind = network_kind(cfg.search.kind)
    m = cfg.model
    arch = network_arch(m.arch, kind.name)
    return build_net(
        m.hidden, m.blocks, m.margin_head, seed, num_features=kind.num_features, arch=arch
    )


def kind_of_schema(feature_schema_id: int) -> str:
    """The search kind a network with this feature schema plays; ValueError if none."""
    for kind in NETWORK_KINDS.values():
        if kind.feature_schema_id == feature_schema_id:
            return kind.name
    raise ValueError(
        f"feature schema {feature_schema_id} is not a Yatzy network schema "
        f"(known: {', '.join(f'{k.feature_schema_id} ({k.name})' for k in NETWORK_KINDS.values())})"
    )
