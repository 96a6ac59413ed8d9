"""What each search kind (``search.kind``) needs from the rest of the pipeline: one frozen
:class:`SearchKind` record per kind.

``puct`` (the PUCT search with chance nodes, docs/reference/search.md) trains a network on feature
schema 1
(positions with dice, policy and value heads); ``turn`` (docs/reference/turn_search.md) trains one
on feature schema 2 (turn starts, value heads only). The kind decides the checkpoint schema, the
replay shard schema, the network's input width and the self-play hero; everything else (trainer,
gating, evaluation, inference server, Ray) is shared. A checkpoint's feature schema tells which
kind it plays (:func:`kind_of_schema`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from leaguezero.az.checkpoint import SchemaIds
from leaguezero.az.evaluator import Evaluator
from leaguezero.az.replay import ShardSchema
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.config import network_arch
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, RULESET_ID
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.search.policy import PolicyAgent
from leaguezero.yatzy.search.puct import SearchAgent
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearchAgent
from leaguezero.yatzy.train.net import build_net
from leaguezero.yatzy.train.selfplay.puct import SHARD_SCHEMA, PuctHero, run_selfplay
from leaguezero.yatzy.train.selfplay.slots import HeroFactory
from leaguezero.yatzy.train.selfplay.turn import TURN_SHARD_SCHEMA, TurnHero, run_turn_selfplay


@dataclass(frozen=True)
class SearchKind:
    """One search kind: the network it trains and the self-play that feeds it.

    ``feature_schema_id`` / ``num_features``: what its network reads; ``shard_schema``: the
    replay shards its self-play writes; ``selfplay``: ``run_selfplay``-compatible self-play;
    ``hero``: the :class:`~leaguezero.yatzy.train.selfplay.slots.SelfPlayHero` of the slot loops;
    ``trains_policy``: whether its network has a policy head to train (PUCT's priors);
    ``agent(evaluator, settings, name, seed)``: the evaluation-mode agent of a network of this
    kind; ``budgeted``: whether its search spends the ``mcts.budget_*`` simulations per
    decision (PUCT) rather than one network evaluation per successor of a turn."""

    name: str
    feature_schema_id: int
    num_features: int
    shard_schema: ShardSchema
    selfplay: Callable
    hero: HeroFactory
    trains_policy: bool
    agent: Callable[[Evaluator, SearchSettings, str, int], Agent]
    budgeted: bool

    @property
    def checkpoint_schema(self) -> SchemaIds:
        """The schema ids a checkpoint of this kind carries (checked on every load)."""
        return SchemaIds(self.feature_schema_id, ACTION_SPACE_ID, RULESET_ID)


def _turn_agent(evaluator: Evaluator, settings: SearchSettings, name: str, seed: int) -> Agent:
    return TurnSearchAgent(
        evaluator, name=name, margin_scale=settings.margin_scale, depth=settings.depth
    )


def _puct_agent(evaluator: Evaluator, settings: SearchSettings, name: str, seed: int) -> Agent:
    if settings.depth != 1:
        raise ValueError("depth is an option of the turn search (search=turn)")
    if settings.raw_policy:
        return PolicyAgent(evaluator, name=name)
    return SearchAgent(evaluator, settings.evaluation(), name=name, salt=seed)


_TURN = SearchKind(
    name="turn",
    feature_schema_id=TURN_FEATURE_SCHEMA_ID,
    num_features=NUM_TURN_FEATURES,
    shard_schema=TURN_SHARD_SCHEMA,
    selfplay=run_turn_selfplay,
    hero=TurnHero,
    trains_policy=False,
    agent=_turn_agent,
    budgeted=False,
)
_PUCT = SearchKind(
    name="puct",
    feature_schema_id=FEATURE_SCHEMA_ID,
    num_features=NUM_FEATURES,
    shard_schema=SHARD_SCHEMA,
    selfplay=run_selfplay,
    hero=PuctHero,
    trains_policy=True,
    agent=_puct_agent,
    budgeted=True,
)
KINDS: dict[str, SearchKind] = {k.name: k for k in (_TURN, _PUCT)}
SEARCH_KINDS = tuple(KINDS)


def search_kind(kind: str) -> SearchKind:
    """The record of ``kind``; ValueError naming the known kinds otherwise."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown search kind {kind!r}: use {' or '.join(SEARCH_KINDS)}") from None


def feature_schema_id(kind: str) -> int:
    """The feature schema id a ``kind`` network reads."""
    return search_kind(kind).feature_schema_id


def num_features(kind: str) -> int:
    """The input width F of a ``kind`` network."""
    return search_kind(kind).num_features


def checkpoint_schema(kind: str) -> SchemaIds:
    """The schema ids a ``kind`` checkpoint carries (checked on every load)."""
    return search_kind(kind).checkpoint_schema


def shard_schema(kind: str) -> ShardSchema:
    """The replay shard schema a ``kind`` self-play writes and its trainer reads."""
    return search_kind(kind).shard_schema


def selfplay_function(kind: str) -> Callable:
    """``run_selfplay`` or ``run_turn_selfplay`` (same signature and resume contract)."""
    return search_kind(kind).selfplay


def hero_factory(kind: str) -> HeroFactory:
    """The hero searcher of the self-play and league slot loops (``PuctHero`` | ``TurnHero``)."""
    return search_kind(kind).hero


def build_network(cfg, seed: int = 0):
    """A freshly initialised network for ``cfg.search.kind`` and ``cfg.model``
    (:func:`leaguezero.yatzy.config.network_arch` resolves ``arch: auto``)."""
    kind = search_kind(cfg.search.kind)
    m = cfg.model
    arch = network_arch(m.arch, kind.name)
    return build_net(
        m.hidden, m.blocks, m.margin_head, seed, num_features=kind.num_features, arch=arch
    )


def kind_of_schema(feature_schema_id: int) -> str:
    """The search kind a network with this feature schema plays; ValueError if none."""
    for kind in KINDS.values():
        if kind.feature_schema_id == feature_schema_id:
            return kind.name
    raise ValueError(
        f"feature schema {feature_schema_id} is not a Yatzy network schema "
        f"(known: {', '.join(f'{k.feature_schema_id} ({k.name})' for k in KINDS.values())})"
    )
