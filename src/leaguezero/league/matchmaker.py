"""Opponent sampling for league training (docs/reference/design.md#matchmaking-pfsp and
#several-adapters-in-one-game).

- :class:`PFSPMatchmaker` draws opponents by bucket (30% mirror, 40% peers, 20% exploitable,
  10% baselines) or with the design's simple tiered weights; every draw says its bucket.
- :class:`WinRateTable` keeps the hero's decayed win rate per opponent for the exploitable
  bucket.
- :func:`cluster_seating` fills a many-seat game with a few unique opponents cloned across
  seats (``[Hero, A, A, A, B, B, B]``), the design's fallback when serving seven unique adapters
  does not fit in memory.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from leaguezero.league.registry import LeagueState
from leaguezero.league.types import AgentKind, Bucket, MatchResult, OpponentType

Rng = random.Random | np.random.Generator


def _randbelow(rng: Rng, n: int) -> int:
    """A uniform integer in ``[0, n)`` from either kind of generator."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(n))
    return rng.randrange(n)


def cluster_seating(
    hero: str,
    opponents: Sequence[str],
    num_seats: int,
    max_unique: int,
    rng: Rng,
    hero_seat: int | None = None,
) -> list[str]:
    """Seat the hero and at most ``max_unique`` distinct opponents, cloned across seats.

    ``opponents`` is the sampler's draw in order (duplicates allowed); its first ``max_unique``
    distinct names are used. The ``num_seats - 1`` non-hero seats are split into contiguous
    blocks, one per opponent, as evenly as possible (earlier opponents get the extra seat):
    7 seats and 2 opponents give ``[Hero, A, A, A, B, B, B]``. ``hero_seat`` places the hero
    (callers rotate it, e.g. ``game_index % num_seats``, so the hero plays every seat/power);
    None draws it uniformly from ``rng``. Returns one agent name per seat.

    Raises ``ValueError`` when there are no opponents for a game with more than one seat, or
    when ``hero_seat`` is out of range.
    """
    if num_seats < 1:
        raise ValueError(f"num_seats must be at least 1, got {num_seats}")
    if max_unique < 1:
        raise ValueError(f"max_unique must be at least 1, got {max_unique}")
    if hero_seat is None:
        hero_seat = _randbelow(rng, num_seats)
    if not 0 <= hero_seat < num_seats:
        raise ValueError(f"hero_seat {hero_seat} is outside 0..{num_seats - 1}")
    other_seats = num_seats - 1
    unique = list(dict.fromkeys(opponents))[: min(max_unique, other_seats)]
    if other_seats and not unique:
        raise ValueError("cluster_seating needs at least one opponent for a multi-seat game")
    fill: list[str] = []
    if other_seats:
        base, extra = divmod(other_seats, len(unique))
        for i, name in enumerate(unique):
            fill.extend([name] * (base + (1 if i < extra else 0)))
    seats = [*fill[:hero_seat], hero, *fill[hero_seat:]]
    return seats


# ----- PFSP -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketShares:
    """Target share of draws per PFSP bucket (docs/reference/league.md#matchmaking); must sum to
    1."""

    mirror: float = 0.30
    peers: float = 0.40
    exploitable: float = 0.20
    baselines: float = 0.10

    def __post_init__(self) -> None:
        values = (self.mirror, self.peers, self.exploitable, self.baselines)
        if min(values) < 0 or abs(sum(values) - 1.0) > 1e-9:
            raise ValueError(f"PFSP bucket shares must be >= 0 and sum to 1, got {values}")

    def as_dict(self) -> dict[Bucket, float]:
        return {
            Bucket.MIRROR: self.mirror,
            Bucket.PEERS: self.peers,
            Bucket.EXPLOITABLE: self.exploitable,
            Bucket.BASELINES: self.baselines,
        }


@dataclass(frozen=True)
class Draw:
    """One sampled opponent and why: log it as ``league.opponent_sampled``."""

    opponent: str
    bucket: Bucket
    opponent_type: OpponentType
    opponent_elo: float | None
    probability: float  # chance of drawing this opponent from this bucket in this draw

    def to_event(self) -> dict[str, object]:
        return {
            "opponent": self.opponent,
            "bucket": self.bucket.value,
            "opponent_type": self.opponent_type.value,
            "opponent_elo": self.opponent_elo,
            "probability": round(self.probability, 6),
        }


class WinRateTable:
    """The hero's exponentially decayed win rate against each opponent.

    Per opponent: ``wins <- decay * wins + score`` and ``games <- decay * games + 1`` for every
    game (score 1 / 0.5 / 0), so old results fade with a half-life of ``ln 2 / -ln decay``
    games (about 34 at 0.98) and the table follows a hero that keeps changing. The win rate is
    ``(wins + prior_games / 2) / (games + prior_games)``: an unseen opponent counts as 50%.
    """

    SCHEMA_VERSION = 1

    def __init__(self, decay: float = 0.98, prior_games: float = 1.0) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.prior_games = prior_games
        self.wins: dict[str, float] = {}
        self.games: dict[str, float] = {}

    def update(self, opponent: str, score: float) -> None:
        self.wins[opponent] = self.decay * self.wins.get(opponent, 0.0) + float(score)
        self.games[opponent] = self.decay * self.games.get(opponent, 0.0) + 1.0

    def update_from_matches(self, results: Iterable[MatchResult], hero: str) -> None:
        """Fold in every pairwise outcome of ``hero`` in ``results`` (in order)."""
        for result in results:
            for a, b, score_a, _ in result.pairwise_outcomes():
                if a == hero:
                    self.update(b, score_a)
                elif b == hero:
                    self.update(a, 1.0 - score_a)

    def win_rate(self, opponent: str) -> float:
        wins, games = self.wins.get(opponent, 0.0), self.games.get(opponent, 0.0)
        return (wins + 0.5 * self.prior_games) / (games + self.prior_games)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": self.SCHEMA_VERSION,
            "decay": self.decay,
            "prior_games": self.prior_games,
            "wins": dict(self.wins),
            "games": dict(self.games),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> WinRateTable:
        if data.get("schema_version") != cls.SCHEMA_VERSION:
            raise ValueError(
                f"win-rate table schema_version {data.get('schema_version')!r}, expected "
                f"{cls.SCHEMA_VERSION}"
            )
        table = cls(float(data["decay"]), float(data["prior_games"]))  # type: ignore[arg-type]
        table.wins = {str(k): float(v) for k, v in dict(data["wins"]).items()}  # type: ignore[call-overload]
        table.games = {str(k): float(v) for k, v in dict(data["games"]).items()}  # type: ignore[call-overload]
        return table


def exploit_weight(win_rate: float, weighting: str = "hard") -> float:
    """AlphaStar's PFSP weighting of an opponent by the hero's win rate ``p`` against it.

    ``"hard"``: ``(1 - p) ** 2`` — most weight on opponents the hero still loses to, none on
    ones it always beats. ``"variance"``: ``p * (1 - p)`` — most weight on even matches.
    """
    if weighting == "hard":
        return (1.0 - win_rate) ** 2
    if weighting == "variance":
        return win_rate * (1.0 - win_rate)
    raise ValueError(f"unknown PFSP weighting {weighting!r}; use 'hard' or 'variance'")


class PFSPMatchmaker:
    """Prioritised fictitious self-play opponent sampling over a league snapshot.

    Each draw first picks a bucket with the target shares, then an opponent in it:

    - mirror: the current hero itself (pure self-play);
    - peers: league agents other than the hero with rating within ``peer_window`` of the hero,
      uniformly;
    - exploitable: every past checkpoint (and exploiter snapshot), weighted by
      :func:`exploit_weight` of the hero's decayed win rate against it — those it still loses
      to come first, and ones it reliably beats drop out (AlphaStar's PFSP over past players).
      No rating filter: the live hero is rated from its sampled training games and the
      checkpoints from the evaluator's greedy ones, so a filter "rated below the hero" left
      the bucket empty for most of an LLM stage (12.9% of draws instead of 20%);
    - baselines: the fixed bots, uniformly (``baselines_weighting="uniform"``) or weighted like
      the exploitable bucket by the hero's decayed win rate against each (``"pfsp"``: training
      time goes to the bots it still loses to; uniform again if every weight is zero).

    Fallback: a bucket with no member (or only zero weights) is skipped and the shares of the
    others are renormalised, so e.g. with no peers the remaining 60% split 30:20:10. Cold start:
    until ``min_checkpoints`` checkpoints exist, every draw is a baseline
    (docs/reference/design.md#registry-and-cold-start).
    ``mode="tiered"`` instead uses the design's simple weights (5.0 within 100 rating, 2.0 within
    300, else 0.5; baselines x2) over all agents. Retired checkpoints
    (``extra["retired"]``) are never drawn. Draws use the ``seed``-ed generator only.
    """

    def __init__(
        self,
        *,
        shares: BucketShares | None = None,
        peer_window: float = 100.0,
        weighting: str = "hard",
        mode: str = "pfsp",
        min_checkpoints: int = 2,
        baselines_weighting: str = "uniform",
        seed: int | None = 0,
    ) -> None:
        if mode not in ("pfsp", "tiered"):
            raise ValueError(f"unknown matchmaking mode {mode!r}; use 'pfsp' or 'tiered'")
        if baselines_weighting not in ("uniform", "pfsp"):
            raise ValueError(
                f"unknown baselines weighting {baselines_weighting!r}; use 'uniform' or 'pfsp'"
            )
        self.baselines_weighting = baselines_weighting
        exploit_weight(0.5, weighting)  # validates the name early
        self.shares = shares or BucketShares()
        self.peer_window = peer_window
        self.weighting = weighting
        self.mode = mode
        samplers = {"pfsp": self._sample_pfsp, "tiered": self._sample_tiered}
        self._sample = samplers[mode]
        self.min_checkpoints = min_checkpoints
        self.rng = np.random.default_rng(seed)

    def buckets(
        self,
        state: LeagueState,
        hero: str,
        hero_elo: float,
        win_rates: WinRateTable | None = None,
    ) -> dict[Bucket, dict[str, float]]:
        """The members of each bucket with their (unnormalised) weights."""
        agents = [a for a in state.agents.values() if not a.extra.get("retired")]
        win_rates = win_rates or WinRateTable()
        baselines = {a.name: 1.0 for a in agents if a.is_baseline}
        if self.baselines_weighting == "pfsp":
            weighted = {n: exploit_weight(win_rates.win_rate(n), self.weighting) for n in baselines}
            if sum(weighted.values()) > 0:
                baselines = weighted
        if len(state.checkpoints) < self.min_checkpoints:
            return {Bucket.BASELINES: baselines}
        others = [a for a in agents if a.name != hero]
        peers = {a.name: 1.0 for a in others if abs(a.elo - hero_elo) <= self.peer_window}
        exploitable = {
            a.name: exploit_weight(win_rates.win_rate(a.name), self.weighting)
            for a in others
            if a.type in (AgentKind.CHECKPOINT, AgentKind.EXPLOITER)
        }
        return {
            Bucket.MIRROR: {hero: 1.0},
            Bucket.PEERS: peers,
            Bucket.EXPLOITABLE: {n: w for n, w in exploitable.items() if w > 0},
            Bucket.BASELINES: baselines,
        }

    def sample(
        self,
        state: LeagueState,
        hero: str,
        hero_elo: float,
        k: int = 1,
        win_rates: WinRateTable | None = None,
    ) -> list[Draw]:
        """``k`` independent draws (with replacement). Raises ``ValueError`` on an empty league."""
        return self._sample(state, hero, hero_elo, k, win_rates)

    def _sample_pfsp(
        self,
        state: LeagueState,
        hero: str,
        hero_elo: float,
        k: int,
        win_rates: WinRateTable | None,
    ) -> list[Draw]:
        members = {b: m for b, m in self.buckets(state, hero, hero_elo, win_rates).items() if m}
        if not members:
            raise ValueError("the league has no agent to sample; create it with baselines")
        target = self.shares.as_dict()
        names = list(members)
        shares = np.array([target.get(b, 0.0) for b in names])
        if shares.sum() <= 0:  # e.g. cold start with a zero baseline share
            shares = np.ones(len(names))
        shares = shares / shares.sum()
        draws = []
        for _ in range(k):
            bucket = names[int(self.rng.choice(len(names), p=shares))]
            candidates = list(members[bucket])
            weights = np.array([members[bucket][c] for c in candidates])
            probs = weights / weights.sum()
            j = int(self.rng.choice(len(candidates), p=probs))
            draws.append(self._draw(state, hero, candidates[j], bucket, float(probs[j])))
        return draws

    def _sample_tiered(
        self,
        state: LeagueState,
        hero: str,
        hero_elo: float,
        k: int,
        win_rates: WinRateTable | None = None,
    ) -> list[Draw]:
        # The design's first version: tiered weights by rating gap, baselines boosted.
        candidates = [a for a in state.agents.values() if not a.extra.get("retired")]
        if not candidates:
            raise ValueError("the league has no agent to sample; create it with baselines")
        weights = []
        for agent in candidates:
            diff = abs(agent.elo - hero_elo)
            weight = 5.0 if diff < 100 else 2.0 if diff < 300 else 0.5
            weights.append(weight * (2.0 if agent.is_baseline else 1.0))
        probs = np.array(weights) / sum(weights)
        picks = self.rng.choice(len(candidates), size=k, p=probs)
        return [
            self._draw(state, hero, candidates[j].name, Bucket.TIERED, float(probs[j]))
            for j in picks
        ]

    @staticmethod
    def _draw(state: LeagueState, hero: str, name: str, bucket: Bucket, prob: float) -> Draw:
        agent = state.agents.get(name)
        if name == hero:
            kind = OpponentType.SELF
        elif agent is not None and agent.is_baseline:
            kind = OpponentType.BASELINE
        else:
            kind = OpponentType.HISTORICAL
        return Draw(name, bucket, kind, None if agent is None else agent.elo, prob)
