"""What each search kind (``search.kind``) needs from the rest of the pipeline.

``puct`` (the PRD's search) trains a network on feature schema 1 (positions with dice, policy
and value heads); ``turn`` trains one on feature schema 2 (turn starts, value heads only). The
kind decides the checkpoint schema, the replay shard schema, the network's input width and the
self-play function; everything else (trainer, gating, evaluation, inference server, Ray) is
shared. A checkpoint's feature schema tells which kind it plays (:func:`kind_of_schema`).
"""

from __future__ import annotations

from collections.abc import Callable

from leaguezero.az.checkpoint import SchemaIds
from leaguezero.az.replay import ShardSchema
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, RULESET_ID
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.train.net import build_net
from leaguezero.yatzy.train.selfplay import SHARD_SCHEMA, PuctHero, run_selfplay
from leaguezero.yatzy.train.turn_selfplay import TURN_SHARD_SCHEMA, TurnHero, run_turn_selfplay

SEARCH_KINDS = ("turn", "puct")
_FEATURES = {"puct": FEATURE_SCHEMA_ID, "turn": TURN_FEATURE_SCHEMA_ID}
_WIDTH = {"puct": NUM_FEATURES, "turn": NUM_TURN_FEATURES}
_SHARDS = {"puct": SHARD_SCHEMA, "turn": TURN_SHARD_SCHEMA}
_SELFPLAY = {"puct": run_selfplay, "turn": run_turn_selfplay}
_HEROES = {"puct": PuctHero, "turn": TurnHero}


def _check(kind: str) -> str:
    if kind not in _FEATURES:
        raise ValueError(f"unknown search kind {kind!r}: use {' or '.join(SEARCH_KINDS)}")
    return kind


def feature_schema_id(kind: str) -> int:
    """The feature schema id a ``kind`` network reads."""
    return _FEATURES[_check(kind)]


def num_features(kind: str) -> int:
    """The input width F of a ``kind`` network."""
    return _WIDTH[_check(kind)]


def checkpoint_schema(kind: str) -> SchemaIds:
    """The schema ids a ``kind`` checkpoint carries (checked on every load)."""
    return SchemaIds(_FEATURES[_check(kind)], ACTION_SPACE_ID, RULESET_ID)


def shard_schema(kind: str) -> ShardSchema:
    """The replay shard schema a ``kind`` self-play writes and its trainer reads."""
    return _SHARDS[_check(kind)]


def selfplay_function(kind: str) -> Callable:
    """``run_selfplay`` or ``run_turn_selfplay`` (same signature and resume contract)."""
    return _SELFPLAY[_check(kind)]


def hero_factory(kind: str) -> Callable:
    """The hero searcher of the self-play and league slot loops (``PuctHero`` | ``TurnHero``)."""
    return _HEROES[_check(kind)]


def build_network(cfg, seed: int = 0):
    """A freshly initialised network for ``cfg.search.kind`` and ``cfg.model`` (``arch: auto``
    is board towers for the turn search, the residual MLP for PUCT)."""
    kind = _check(cfg.search.kind)
    arch = cfg.model.arch
    if arch == "auto":
        arch = "board_towers" if kind == "turn" else "resmlp"
    if arch == "board_towers" and kind != "turn":
        raise ValueError("model.arch=board_towers reads turn starts: it needs search.kind=turn")
    m = cfg.model
    return build_net(m.hidden, m.blocks, m.margin_head, seed, num_features=_WIDTH[kind], arch=arch)


def kind_of_schema(feature_schema_id: int) -> str:
    """The search kind a network with this feature schema plays; ValueError if none."""
    for kind, fid in _FEATURES.items():
        if fid == feature_schema_id:
            return kind
    raise ValueError(
        f"feature schema {feature_schema_id} is not a Yatzy network schema "
        f"(known: {', '.join(f'{v} ({k})' for k, v in _FEATURES.items())})"
    )
