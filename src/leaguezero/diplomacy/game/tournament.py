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

import contextlib
import math
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaguezero.common.lockstep import Lockstep
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentSpec, Seating
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout
from leaguezero.diplomacy.game.scoring import win_shares
from leaguezero.diplomacy.game.seats import AgentResolver
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import cluster_seating
from leaguezero.league.rating import update_elo_multiplayer
from leaguezero.league.types import MatchResult, Participant

REPORT_SCHEMA_VERSION = 1
WIN_DEFINITION = (
    "a seat wins when its final score is the single highest; a k-way tie for the highest "
    "score gives each tied seat 1/k; win_rate = wins / seats played"
)


SE_NOTE = (
    "win_rate_se, mean_score_se, mean_sos_se: standard errors over games (an agent's seats in "
    "one game are not independent; its per-game mean is)"
)
RATINGS_NOTE = (
    "Elo from these games only: every agent starts at rating_before (initial_rating = {initial} "
    "unless the caller gave ratings) and moves by the multi-player Elo (K = league.elo_k); the "
    "config's league.*_elo (dumb_bot_elo {dumb} ...) are where league training starts its "
    "baselines, not used here"
)


def seat_powers(
    hero: AgentSpec,
    opponents: Sequence[AgentSpec],
    game_idx: int,
    max_unique: int,
    rng: random.Random,
) -> Seating:
    """{power: agent} for game ``game_idx``: cluster seating with the hero rotated to power
    ``game_idx % 7`` and the opponents' blocks rotated with it."""
    if not opponents:
        raise ValueError("a tournament needs at least one opponent")
    # cluster_seating works on names; each seat gets the spec its name was parsed into.
    specs = {spec.name: spec for spec in [hero, *opponents]}
    seats = cluster_seating(
        hero.name,
        [o.name for o in opponents],
        num_seats=len(POWERS),
        max_unique=max_unique,
        rng=rng,
        hero_seat=0,
    )
    shift = game_idx % len(POWERS)
    return {POWERS[(seat + shift) % len(POWERS)]: specs[seats[seat]] for seat in range(len(seats))}


def most_centres_shares(centers: dict[str, int]) -> dict[str, float]:
    """Each power's share of "ended with the most supply centres": 1 for the single leader, 1/k
    each for a k-way tie, 0 otherwise (the DipNet paper's "most centres" column)."""
    top = max(centers.values())
    leaders = [p for p, n in centers.items() if n == top]
    return {p: (1.0 / len(leaders) if p in leaders else 0.0) for p in centers}


@dataclass
class _Tally:
    seats: int = 0
    wins: float = 0.0
    score: float = 0.0
    sos: float = 0.0
    centers: float = 0.0
    solos: int = 0
    most_centres: float = 0.0
    # Per game, the mean win share and score of this agent's seats: the games are independent,
    # an agent's six seats in one game are not, so standard errors are taken over these.
    game_wins: list[float] = field(default_factory=list)
    game_scores: list[float] = field(default_factory=list)
    game_sos: list[float] = field(default_factory=list)

    def add(
        self, win: float, score: float, sos: float, centers: int, solo: bool, most: float
    ) -> None:
        self.seats += 1
        self.wins += win
        self.score += score
        self.sos += sos
        self.centers += centers
        self.solos += solo
        self.most_centres += most

    def end_game(
        self, wins: Sequence[float], scores: Sequence[float], sos: Sequence[float]
    ) -> None:
        """Close one game: the win shares, scores and sums of squares of this agent's seats."""
        self.game_wins.append(sum(wins) / len(wins))
        self.game_scores.append(sum(scores) / len(scores))
        self.game_sos.append(sum(sos) / len(sos))

    def summary(self) -> dict[str, float]:
        n = max(self.seats, 1)
        return {
            "seats": self.seats,
            "wins": round(self.wins, 6),
            "win_rate": self.wins / n,
            "win_rate_se": standard_error(self.game_wins),
            "mean_score": self.score / n,
            "mean_score_se": standard_error(self.game_scores),
            "mean_sos": self.sos / n,
            "mean_sos_se": standard_error(self.game_sos),
            "mean_centers": self.centers / n,
            # Published 1-vs-6 tables count these (DipNet): a solo is >= solo_sc centres.
            "solo_rate": self.solos / n,
            "most_centres_rate": self.most_centres / n,
        }


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean of ``values`` (None below two values: no spread known)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def game_summary(game: RolloutResult) -> dict[str, Any]:
    """One finished game as the eval JSON's ``per_game`` entry and a ``--results`` line."""
    hero_llm = game.llm_answers.get(game.hero_power)
    return {
        "game_idx": game.game_idx,
        "seed": game.seed,
        "hero_power": game.hero_power,
        "power_agents": game.power_agents,
        "scores": game.scores,
        "centers": game.centers,
        "ended_by": game.ended_by,
        "final_year": game.final_year,
        "seconds": round(game.seconds, 2),
        "invalid_orders": sum(game.invalid_orders.values()),
        "missing_orders": sum(game.missing_orders.values()),
        "llm_answers": game.llm_answers,
        "hero_llm_answers": hero_llm,
        "saved_game": game.saved_game,
    }


def llm_answer_totals(games: Sequence[RolloutResult], hero_only: bool = False) -> dict[str, int]:
    """The LLM seats' own counts summed over ``games`` (``hero_only``: the hero's seat)."""
    totals = {"answers": 0, "invalid": 0, "missing": 0, "truncated": 0, "grammar_violations": 0}
    for game in games:
        for power, counts in game.llm_answers.items():
            if hero_only and power != game.hero_power:
                continue
            for key in totals:
                totals[key] += int(counts.get(key, 0))
    return totals


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
        """The ``leaguezero diplomacy eval --json`` object (see docs/reference/diplomacy.md)."""

        def ratings(name: str) -> dict[str, float]:
            before, after = self.ratings_before[name], self.ratings_after[name]
            return {"rating_before": before, "rating_after": after, "rating_change": after - before}

        invalid = sum(sum(g.invalid_orders.values()) for g in self.games)
        missing = sum(sum(g.missing_orders.values()) for g in self.games)
        llm_all = llm_answer_totals(self.games)
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "games": len(self.games),
            "seed": self.seed,
            "win_definition": WIN_DEFINITION,
            "se_definition": SE_NOTE,
            "hero": {"agent": self.hero, **self.hero_tally.summary(), **ratings(self.hero)},
            "opponents": {
                name: {**tally.summary(), **ratings(name)}
                for name, tally in self.opponent_tallies.items()
            },
            "ratings": dict(self.ratings_after),
            "ratings_note": RATINGS_NOTE.format(
                initial=self.config.get("initial_rating"),
                dumb=self.config.get("league", {}).get("dumb_bot_elo"),
            ),
            # The engine's counts: orders it had to drop or fill after the seats' parsers.
            "invalid_orders": invalid,
            "missing_orders": missing,
            # The LLM seats' own counts, before the parser or a constraint hid anything: order
            # lines that were not legal, owed orders not written, answers cut at the budget,
            # constrained answers outside their expression (failed seats: a server whose
            # grammar engine masks otherwise than the trainer; alarmed on stderr by the client).
            "llm_answers": llm_all["answers"],
            "llm_invalid_orders": llm_all["invalid"],
            "llm_missing_orders": llm_all["missing"],
            "llm_truncated_answers": llm_all["truncated"],
            "llm_grammar_violations": llm_all["grammar_violations"],
            "hero_llm": llm_answer_totals(self.games, hero_only=True),
            "per_game": [game_summary(g) for g in self.games],
            # Last: ~2 KB that a reader of the results scrolls past (the resolved config).
            "config": self.config,
        }


def run_tournament(
    cfg: DiplomacyConfig,
    hero: AgentSpec,
    opponents: Sequence[AgentSpec],
    games: int,
    *,
    resolver: AgentResolver | None = None,
    ratings: dict[str, float] | None = None,
    matchlog: str | Path | None = None,
    save_dir: str | Path | None = None,
    step: int = 0,
    on_game: Callable[[RolloutResult], None] | None = None,
    concurrent_games: int = 1,
) -> TournamentResult:
    """Play ``games`` games of ``hero`` against ``opponents`` (see module doc).

    The agents come parsed (the command line's, the league evaluator's); reports, ratings and
    the match log name them by :attr:`~leaguezero.diplomacy.game.catalogue.AgentSpec.name`.
    ``cfg.run.seed`` seeds the seating and every game (``group_idx`` = 0, ``game_idx`` = i).
    ``ratings`` are the starting ratings (agents not in it start at ``cfg.initial_rating``);
    ``matchlog`` appends one :class:`~leaguezero.league.types.MatchResult` per game (kind
    ``"evaluation"``, seats are powers, scores the final scores); ``save_dir`` overrides
    ``cfg.games_dir`` for the saved games; ``on_game`` is called after each game (progress).
    ``concurrent_games``: games played at once in threads, as one
    :class:`~leaguezero.common.lockstep.Lockstep` group (the in-process LLM seats of all of
    them share one batch a phase, reproducibly); the seating, seeds, ratings, log and callbacks
    follow the game order as when played in turn.
    """
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    hero_label = hero.name
    names = [hero_label, *(o.name for o in opponents)]
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
    seatings = [
        seat_powers(hero, opponents, game_idx, cfg.max_unique_opponents, rng)
        for game_idx in range(games)
    ]

    group = Lockstep(games, concurrent_games) if concurrent_games > 1 else None

    def play(game_idx: int) -> RolloutResult:
        member = group.game(game_idx) if group is not None else contextlib.nullcontext()
        with member:
            return run_rollout(
                cfg,
                0,
                game_idx,
                seatings[game_idx],
                POWERS[game_idx % len(POWERS)],
                resolver=resolver,
                save_dir=save_dir,
                metadata={"hero": hero_label, "kind": "evaluation"},
            )

    pool = ThreadPoolExecutor(concurrent_games) if concurrent_games > 1 else None
    try:
        # In game order either way (a pool's map yields results in the order asked).
        played_games = pool.map(play, range(games)) if pool is not None else map(play, range(games))
        for game_idx, played in enumerate(played_games):
            _record_game(result, played, game_idx, cfg, current, log, step, hero_label, on_game)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    result.ratings_after = dict(current)
    return result


def _record_game(
    result: TournamentResult,
    played: RolloutResult,
    game_idx: int,
    cfg: DiplomacyConfig,
    current: dict[str, float],
    log: MatchLog | None,
    step: int,
    hero_label: str,
    on_game: Callable[[RolloutResult], None] | None,
) -> None:
    """One finished game into the tallies, the ratings, the match log and the callback."""
    hero_power = POWERS[game_idx % len(POWERS)]
    result.games.append(played)
    shares = win_shares(played.scores)
    most = most_centres_shares(played.centers)
    seats: dict[int, tuple[_Tally, list[float], list[float], list[float]]] = {}
    for power in POWERS:
        agent = played.power_agents[power]
        tally = (
            result.hero_tally
            if power == hero_power
            else result.opponent_tallies.setdefault(agent, _Tally())
        )
        tally.add(
            shares[power],
            played.scores[power],
            played.sos_scores[power],
            played.centers[power],
            played.centers[power] >= cfg.solo_sc,
            most[power],
        )
        _, wins, scores, sos = seats.setdefault(id(tally), (tally, [], [], []))
        wins.append(shares[power])
        scores.append(played.scores[power])
        sos.append(played.sos_scores[power])
    for tally, wins, scores, sos in seats.values():
        tally.end_game(wins, scores, sos)
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
