"""Hero-versus-field tournaments: seating, per-game Elo, match log and the eval report.

Game ``i`` seats the hero and its opponents with the league's
:func:`~leaguezero.league.matchmaker.cluster_seating` (at most ``cfg.max_unique_opponents``
distinct opponents, cloned as ``[Hero, A, A, A, B, B, B]``) and then rotates the whole seating by
``i`` powers, so over 7 consecutive games the hero plays every power and every opponent's block
moves round the board with it.

**Win.** A seat wins a game when its final score (:func:`~.scoring.calculate_final_scores`) is
the single highest; a k-way tie for the highest score gives each tied seat 1/k of a win. An
agent's win rate is its wins divided by the seats it played, so six equal agents and a hero
of the same strength each have 1/7.

**Ratings.** After each game every seat is rated with the multi-player Elo
(:func:`~leaguezero.league.rating.update_elo_multiplayer`, K = ``cfg.league.elo_k``) using its
agent's rating before the game, and each agent's change is the sum over its seats. Pairs of seats
of one agent cancel exactly, so an agent is moved only by its games against others and the update is
zero-sum, as in the league's own match-log fit.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout
from leaguezero.diplomacy.game.scoring import win_shares
from leaguezero.diplomacy.game.seats import AgentResolver, agent_label
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import cluster_seating
from leaguezero.league.rating import update_elo_multiplayer
from leaguezero.league.types import MatchResult, Participant

REPORT_SCHEMA_VERSION = 1
WIN_DEFINITION = (
    "a seat wins when its final score is the single highest; a k-way tie for the highest "
    "score gives each tied seat 1/k; win_rate = wins / seats played"
)


def seat_powers(
    hero: str | None,
    opponents: Sequence[str | None],
    game_idx: int,
    max_unique: int,
    rng: random.Random,
) -> dict[str, str | None]:
    """{power: agent} for game ``game_idx``: cluster seating with the hero rotated to power
    ``game_idx % 7`` and the opponents' blocks rotated with it."""
    if not opponents:
        raise ValueError("a tournament needs at least one opponent")
    # cluster_seating works on names; None (the base model) travels as its label.
    labels = {agent_label(name): name for name in [hero, *opponents]}
    seats = cluster_seating(
        agent_label(hero),
        [agent_label(o) for o in opponents],
        num_seats=len(POWERS),
        max_unique=max_unique,
        rng=rng,
        hero_seat=0,
    )
    shift = game_idx % len(POWERS)
    return {POWERS[(seat + shift) % len(POWERS)]: labels[seats[seat]] for seat in range(len(seats))}


@dataclass
class _Tally:
    seats: int = 0
    wins: float = 0.0
    score: float = 0.0
    sos: float = 0.0
    centers: float = 0.0

    def add(self, win: float, score: float, sos: float, centers: int) -> None:
        self.seats += 1
        self.wins += win
        self.score += score
        self.sos += sos
        self.centers += centers

    def summary(self) -> dict[str, float]:
        n = max(self.seats, 1)
        return {
            "seats": self.seats,
            "wins": round(self.wins, 6),
            "win_rate": self.wins / n,
            "mean_score": self.score / n,
            "mean_sos": self.sos / n,
            "mean_centers": self.centers / n,
        }


@dataclass
class TournamentResult:
    """Per-game results plus rating trajectories; :meth:`report` is the eval JSON."""

    hero: str
    opponents: list[str]
    seed: int
    config: dict[str, Any]
    games: list[RolloutResult] = field(default_factory=list)
    ratings_before: dict[str, float] = field(default_factory=dict)
    ratings_after: dict[str, float] = field(default_factory=dict)
    hero_tally: _Tally = field(default_factory=_Tally)
    opponent_tallies: dict[str, _Tally] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """The ``leaguezero diplomacy eval --json`` object (see docs/diplomacy.md)."""

        def ratings(name: str) -> dict[str, float]:
            before, after = self.ratings_before[name], self.ratings_after[name]
            return {"rating_before": before, "rating_after": after, "rating_change": after - before}

        invalid = sum(sum(g.invalid_orders.values()) for g in self.games)
        missing = sum(sum(g.missing_orders.values()) for g in self.games)
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "games": len(self.games),
            "seed": self.seed,
            "win_definition": WIN_DEFINITION,
            "config": self.config,
            "hero": {"agent": self.hero, **self.hero_tally.summary(), **ratings(self.hero)},
            "opponents": {
                name: {**tally.summary(), **ratings(name)}
                for name, tally in self.opponent_tallies.items()
            },
            "ratings": dict(self.ratings_after),
            "invalid_orders": invalid,
            "missing_orders": missing,
            "per_game": [
                {
                    "game_idx": g.game_idx,
                    "hero_power": g.hero_power,
                    "power_agents": g.power_agents,
                    "scores": g.scores,
                    "centers": g.centers,
                    "ended_by": g.ended_by,
                    "final_year": g.final_year,
                    "saved_game": g.saved_game,
                }
                for g in self.games
            ],
        }


def run_tournament(
    cfg: DiplomacyConfig,
    hero: str | None,
    opponents: Sequence[str | None],
    games: int,
    *,
    resolver: AgentResolver | None = None,
    ratings: dict[str, float] | None = None,
    matchlog: str | Path | None = None,
    save_dir: str | Path | None = None,
    step: int = 0,
    on_game: Callable[[RolloutResult], None] | None = None,
) -> TournamentResult:
    """Play ``games`` games of ``hero`` against ``opponents`` (see module doc).

    ``cfg.run.seed`` seeds the seating and every game (``group_idx`` = 0, ``game_idx`` = i).
    ``ratings`` are the starting ratings (agents not in it start at ``cfg.initial_rating``);
    ``matchlog`` appends one :class:`~leaguezero.league.types.MatchResult` per game (kind
    ``"evaluation"``, seats are powers, scores the final scores); ``save_dir`` overrides
    ``cfg.games_dir`` for the saved games; ``on_game`` is called after each game (progress).
    """
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    hero_label = agent_label(hero)
    names = [hero_label, *(agent_label(o) for o in opponents)]
    current = {name: float((ratings or {}).get(name, cfg.initial_rating)) for name in names}
    result = TournamentResult(
        hero=hero_label,
        opponents=list(dict.fromkeys(names[1:])),
        seed=cfg.run.seed,
        config=cfg.model_dump(mode="json"),
        ratings_before=dict(current),
    )
    rng = random.Random(cfg.run.seed)
    log = MatchLog(matchlog) if matchlog is not None else None
    for game_idx in range(games):
        seating = seat_powers(hero, opponents, game_idx, cfg.max_unique_opponents, rng)
        hero_power = POWERS[game_idx % len(POWERS)]
        played = run_rollout(
            cfg,
            0,
            game_idx,
            seating,
            hero_power,
            resolver=resolver,
            save_dir=save_dir,
            metadata={"hero": hero_label, "kind": "evaluation"},
        )
        result.games.append(played)
        shares = win_shares(played.scores)
        for power in POWERS:
            agent = played.power_agents[power]
            tally = (
                result.hero_tally
                if power == hero_power
                else result.opponent_tallies.setdefault(agent, _Tally())
            )
            tally.add(
                shares[power], played.scores[power], played.sos_scores[power], played.centers[power]
            )
        seat_ratings = {power: current[played.power_agents[power]] for power in POWERS}
        updated = update_elo_multiplayer(played.scores, seat_ratings, cfg.league.elo_k)
        for power in POWERS:
            current[played.power_agents[power]] += updated[power] - seat_ratings[power]
        if log is not None:
            log.append(
                MatchResult(
                    participants=tuple(
                        Participant(played.power_agents[p], p, played.scores[p]) for p in POWERS
                    ),
                    step=step,
                    game="diplomacy",
                    kind="evaluation",
                    meta={
                        "seed": played.seed,
                        "game_idx": game_idx,
                        "hero": hero_label,
                        "hero_power": hero_power,
                        "sos_scores": played.sos_scores,
                        "centers": played.centers,
                        "final_year": played.final_year,
                        "ended_by": played.ended_by,
                        "saved_game": played.saved_game,
                    },
                )
            )
        if on_game is not None:
            on_game(played)
    result.ratings_after = dict(current)
    return result
