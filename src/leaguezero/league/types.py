"""League data types: who an agent is, what kind of opponent it is, and what a match produced.

:data:`BASE_MODEL` and :func:`checkpoint_name` are the league names every game uses. The types
are plain dataclasses with ``to_dict``/``from_dict`` so that the registry (``league.json``)
and the match log (NDJSON) store them as ordinary JSON. Nothing here knows a game: a seat is an
integer (Yatzy seat 0/1) or a string (a Diplomacy power), and a score is whatever the game
compares (higher is better; equal scores tie).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

BASE_MODEL = "base_model"  # the league's name of the untrained starting point (step 0)


def checkpoint_name(step: int) -> str:
    """Immutable league name of the hero's snapshot after ``step`` training steps
    (``ckpt_000050``, as in docs/reference/design.md); the same format in every game."""
    return f"ckpt_{step:06d}"


class AgentKind(enum.StrEnum):
    """What an entry of ``league.json`` is (the design's ``type`` field)."""

    BASELINE = "baseline"  # a fixed bot or the untrained base model; path may be null
    CHECKPOINT = "checkpoint"  # a trained snapshot of the hero, with a path and a step
    # A frozen snapshot of an exploiter (trained against the hero or the league, never the
    # hero's lineage), with a path, a step and extra["role"]: "main" or "league".
    EXPLOITER = "exploiter"


class OpponentType(enum.StrEnum):
    """An opponent as seen from the hero, for logging win rates by opponent type."""

    SELF = "self"  # the current hero (mirror self-play)
    HISTORICAL = "historical"  # a past checkpoint of the hero
    BASELINE = "baseline"  # a fixed bot / the base model


class Bucket(enum.StrEnum):
    """The PFSP bucket a draw came from (docs/reference/league.md#matchmaking); logged with every
    draw."""

    MIRROR = "mirror"  # the current self
    PEERS = "peers"  # rating within +-peer_window of the hero
    EXPLOITABLE = "exploitable"  # opponents the hero used to lose to
    BASELINES = "baselines"  # fixed bots, a regression "unit test"
    TIERED = "tiered"  # the design's simple tiered-weight mode (no buckets)


@dataclass
class AgentInfo:
    """One agent of the league (one entry of ``league.json["agents"]``).

    ``elo`` is the rating on the Elo scale; ``elo_low``/``elo_high`` the bootstrap interval from
    the last batch refit (None before any refit). ``path`` is relative to the run directory (or
    absolute); baselines usually have none. ``parent`` names the checkpoint this one was trained
    from (lineage). ``created_at`` is an ISO-8601 UTC timestamp.
    """

    name: str
    type: AgentKind
    elo: float
    matches: int = 0
    path: str | None = None
    step: int | None = None
    created_at: str | None = None
    parent: str | None = None
    elo_low: float | None = None
    elo_high: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_baseline(self) -> bool:
        return self.type == AgentKind.BASELINE

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``name`` is the key in ``agents``, so it is not repeated)."""
        out: dict[str, Any] = {
            "type": self.type.value,
            "elo": float(self.elo),
            "matches": int(self.matches),
            "path": self.path,
            "step": self.step,
            "created_at": self.created_at,
            "parent": self.parent,
            "elo_low": self.elo_low,
            "elo_high": self.elo_high,
        }
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> AgentInfo:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed entry."""
        try:
            return cls(
                name=name,
                type=AgentKind(data["type"]),
                elo=float(data["elo"]),
                matches=int(data.get("matches", 0)),
                path=data.get("path"),
                step=None if data.get("step") is None else int(data["step"]),
                created_at=data.get("created_at"),
                parent=data.get("parent"),
                elo_low=None if data.get("elo_low") is None else float(data["elo_low"]),
                elo_high=None if data.get("elo_high") is None else float(data["elo_high"]),
                extra=dict(data.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"agent {name!r} is malformed: {err!r}") from None


@dataclass(frozen=True)
class Participant:
    """One seat of a match: which agent sat there and what it scored."""

    agent: str
    seat: int | str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "seat": self.seat, "score": float(self.score)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Participant:
        return cls(agent=str(data["agent"]), seat=data["seat"], score=float(data["score"]))


TRAINING_KIND = "training"  # MatchResult.kind of a game the hero trained on
EVALUATION_KIND = "evaluation"  # MatchResult.kind of an evaluator's game


@dataclass(frozen=True)
class MatchResult:
    """The outcome of one game between agents of the league.

    ``participants`` lists every seat (an agent may fill several seats under cluster
    sampling). ``step`` is the hero's training step when the game was played (the x-axis of
    rating charts); ``kind`` says who produced it (``"evaluation"`` for the evaluator,
    ``"training"`` for self-play games); ``timestamp`` is unix seconds. ``meta`` holds anything
    game-specific (seed, hero seat, game length) and is never interpreted by the league.
    """

    participants: tuple[Participant, ...]
    step: int = 0
    timestamp: float = 0.0
    game: str = ""
    kind: str = EVALUATION_KIND
    match_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def agents(self) -> list[str]:
        """Distinct agents in seat order of first appearance."""
        return list(dict.fromkeys(p.agent for p in self.participants))

    def scores_by_agent(self) -> dict[str, float]:
        """Mean score per distinct agent (cluster-sampled clones are averaged)."""
        totals: dict[str, list[float]] = {}
        for p in self.participants:
            totals.setdefault(p.agent, []).append(p.score)
        return {name: sum(v) / len(v) for name, v in totals.items()}

    def pairwise_outcomes(self) -> Iterator[tuple[str, str, float, float]]:
        """Yield ``(agent_a, agent_b, score_a, weight)`` for every pair of seats with distinct
        agents: ``score_a`` is 1 / 0.5 / 0 as A's seat scored more / the same / less than B's.

        ``weight`` is ``1 / (n_seats - 1)``, the design's k/(n-1) scaling: a 7-player game moves
        each player as much as one 2-player game, and a 2-player game has weight 1. Pairs of
        clones of one agent carry no information about ratings and are skipped.
        """
        seats = self.participants
        n = len(seats)
        if n < 2:
            return
        weight = 1.0 / (n - 1)
        for i, a in enumerate(seats):
            for b in seats[i + 1 :]:
                if a.agent == b.agent:
                    continue
                if a.score > b.score:
                    score_a = 1.0
                elif a.score == b.score:
                    score_a = 0.5
                else:
                    score_a = 0.0
                yield a.agent, b.agent, score_a, weight

    def to_dict(self) -> dict[str, Any]:
        return {
            "match_id": self.match_id,
            "step": int(self.step),
            "timestamp": float(self.timestamp),
            "game": self.game,
            "kind": self.kind,
            "participants": [p.to_dict() for p in self.participants],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MatchResult:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed record."""
        try:
            return cls(
                participants=tuple(Participant.from_dict(p) for p in data["participants"]),
                step=int(data.get("step", 0)),
                timestamp=float(data.get("timestamp", 0.0)),
                game=str(data.get("game", "")),
                kind=str(data.get("kind", "evaluation")),
                match_id=str(data.get("match_id", "")),
                meta=dict(data.get("meta") or {}),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed match record: {err!r}") from None
