"""What one training step of a league run drew and how its hero did: the fields of the
``league.step_summary`` event (:mod:`~.tracking`) that :meth:`~.session.LeagueSession.end_step`
writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from leaguezero.league.matchmaker import Draw
from leaguezero.league.types import AgentInfo, MatchResult, OpponentType


def step_summary(
    step: int,
    hero: str,
    hero_elo: float,
    draws: Iterable[Draw],
    results: Iterable[MatchResult],
    agents: Mapping[str, AgentInfo],
) -> dict[str, Any]:
    """Bucket and opponent-type counts of ``draws``; the mean pairwise score of ``hero`` (rated
    ``hero_elo``) against each opponent type in ``results`` (games against itself only are left
    out; an opponent is a baseline when ``agents``, the registry's, says so)."""
    draws = list(draws)
    buckets: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for draw in draws:
        buckets[draw.bucket.value] = buckets.get(draw.bucket.value, 0) + 1
        kinds[draw.opponent_type.value] = kinds.get(draw.opponent_type.value, 0) + 1
    totals: dict[str, list[float]] = {}
    for result in results:
        for a, b, score_a, _ in result.pairwise_outcomes():
            if hero not in (a, b):
                continue
            other, score = (b, score_a) if a == hero else (a, 1.0 - score_a)
            info = agents.get(other)
            kind = (
                OpponentType.BASELINE
                if info is not None and info.is_baseline
                else OpponentType.HISTORICAL
            )
            totals.setdefault(kind.value, [0.0, 0.0])
            totals[kind.value][0] += score
            totals[kind.value][1] += 1.0
    return {
        "step": step,
        "hero_elo": round(hero_elo, 2),
        "draws": len(draws),
        "buckets": buckets,
        "opponent_types": kinds,
        "win_rate_by_type": {k: round(s / n, 4) for k, (s, n) in totals.items()},
    }
