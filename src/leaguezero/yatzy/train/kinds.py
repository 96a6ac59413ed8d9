"""What each search kind (``search.kind``) needs from the training pipeline: one frozen
:class:`SearchKind` record per kind.

The kind decides the replay shard schema and the self-play hero (and its network's input width
and checkpoint schema: :mod:`leaguezero.yatzy.net.schema`, which the record holds as its
``network``); everything else (trainer, gating, evaluation, inference server, Ray) is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from leaguezero.az.replay import ShardSchema
from leaguezero.yatzy.net.schema import PUCT_NETWORK, SEARCH_KINDS, TURN_NETWORK, NetworkKind
from leaguezero.yatzy.train.selfplay.puct import SHARD_SCHEMA, PuctHero, run_selfplay
from leaguezero.yatzy.train.selfplay.slots import HeroFactory
from leaguezero.yatzy.train.selfplay.turn import TURN_SHARD_SCHEMA, TurnHero, run_turn_selfplay


@dataclass(frozen=True)
class SearchKind:
    """One search kind: the network it trains and the self-play that feeds it.

    ``network``: what its network reads (feature schema, width, checkpoint schema);
    ``shard_schema``: the replay shards its self-play writes; ``selfplay``:
    ``run_selfplay``-compatible self-play; ``hero``: the
    :class:`~leaguezero.yatzy.train.selfplay.slots.SelfPlayHero` of the slot loops;
    ``trains_policy``: whether its network has a policy head to train (PUCT's priors);
    ``budgeted``: whether its search spends the ``mcts.budget_*`` simulations per decision
    (PUCT) rather than one network evaluation per successor of a turn."""

    network: NetworkKind
    shard_schema: ShardSchema
    selfplay: Callable
    hero: HeroFactory
    trains_policy: bool
    budgeted: bool

    @property
    def name(self) -> str:
        return self.network.name


_TURN = SearchKind(
    network=TURN_NETWORK,
    shard_schema=TURN_SHARD_SCHEMA,
    selfplay=run_turn_selfplay,
    hero=TurnHero,
    trains_policy=False,
    budgeted=False,
)
_PUCT = SearchKind(
    network=PUCT_NETWORK,
    shard_schema=SHARD_SCHEMA,
    selfplay=run_selfplay,
    hero=PuctHero,
    trains_policy=True,
    budgeted=True,
)
KINDS: dict[str, SearchKind] = {k.name: k for k in (_TURN, _PUCT)}


def search_kind(kind: str) -> SearchKind:
    """The record of ``kind``; ValueError naming the known kinds otherwise."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown search kind {kind!r}: use {' or '.join(SEARCH_KINDS)}") from None


def shard_schema(kind: str) -> ShardSchema:
    """The replay shard schema a ``kind`` self-play writes and its trainer reads."""
    return search_kind(kind).shard_schema


def selfplay_function(kind: str) -> Callable:
    """``run_selfplay`` or ``run_turn_selfplay`` (same signature and resume contract)."""
    return search_kind(kind).selfplay


def hero_factory(kind: str) -> HeroFactory:
    """The hero searcher of the self-play and league slot loops (``PuctHero`` | ``TurnHero``)."""
    return search_kind(kind).hero
