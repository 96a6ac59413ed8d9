"""One game with a (possibly) different agent on every power
(docs/reference/design.md#rollouts-with-an-agent-per-power).

:func:`run_rollout` plays a no-press game where each power is played by the agent its
``seating`` entry holds (an :class:`~leaguezero.diplomacy.game.catalogue.AgentSpec`): a bot
(built here, never touches a model), the base model, or an adapter/checkpoint (both resolved by
the caller's :data:`~leaguezero.diplomacy.game.seats.AgentResolver`, which is handed the seat's
spec). Only the hero power's steps are recorded.

Every phase is played by :func:`~leaguezero.diplomacy.game.phase.play_phase`, which checks
each agent's orders against the phase's legal orders, counts the invalid and missing ones and
fills the missing ones (units hold, dislodged units disband).

Synchronous by design: bots answer in microseconds, and a language model batches behind the
same resolver. :class:`~leaguezero.diplomacy.llm.tables.LLMTable` answers every LLM seat of a
game: the first seat asked in a phase samples all of them in one batched call (many games run
on threads share one batching generator), so this loop needs no asynchronous path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentSpec, Seating, parse_seating
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.phase import play_phase
from leaguezero.diplomacy.game.scoring import (
    calculate_final_scores,
    running_scores,
    sum_of_squares_scores,
)
from leaguezero.diplomacy.game.seats import AgentResolver, Policy, ReportsAnswers, resolve_agent


@dataclass
class HeroStep:
    """One phase of the hero power: what it saw, what it could do, what it said and what ran.

    ``legal_orders``: {orderable location: legal orders}; ``orders``: the agent's raw answer;
    ``submitted``: the orders given to the engine after validation (fills included).
    """

    phase: str
    observation: dict[str, Any] | None
    legal_orders: dict[str, list[str]]
    orders: list[str]
    submitted: list[str]
    invalid: int
    missing: int


@dataclass
class RolloutResult:
    """A finished game: who sat where, scores, order hygiene and the hero's trajectory."""

    group_idx: int
    game_idx: int
    seed: int
    hero_power: str
    power_agents: dict[str, str]  # power -> agent label (None shown as "base_model")
    scores: dict[str, float]  # calculate_final_scores
    sos_scores: dict[str, float]  # sum-of-squares
    centers: dict[str, int]
    units: dict[str, int]
    invalid_orders: dict[str, int]
    missing_orders: dict[str, int]
    phases: int  # phases processed
    final_year: int  # the last year played
    ended_by: str  # "solo", "max_years" or "engine"
    seconds: float
    saved_game: str | None = None
    steps: list[HeroStep] = field(default_factory=list)
    # Every phase's submitted orders, all powers: [{"phase": "S1901M", "orders": {power: [...]}}]
    order_history: list[dict[str, Any]] = field(default_factory=list)
    # Each power's running score (scoring.running_scores) when each phase began (per-phase credit)
    phase_start: dict[str, dict[str, float]] = field(default_factory=dict)
    # The LLM seats' own answer counts (seats.ReportsAnswers), before validation: {power:
    # {answers, invalid, missing, truncated, grammar_violations}}; the engine-side counts above
    # see only what the parser let through.
    llm_answers: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (trajectory included)."""
        return asdict(self)


def rollout_seed(master_seed: int, group_idx: int, game_idx: int) -> int:
    """The seed of one game, a stable function of the master seed and its indices."""
    return int(np.random.SeedSequence([master_seed, group_idx, game_idx]).generate_state(1)[0])


def seat_seed(game_seed: int, power: str) -> int:
    """Each seat's own seed, so one agent's choices do not shift another's random stream."""
    return int(np.random.SeedSequence([game_seed, POWERS.index(power)]).generate_state(1)[0])


def _check_seats(seating: Seating, hero_power: str) -> None:
    unknown = sorted(set(seating) - set(POWERS))
    absent = [p for p in POWERS if p not in seating]
    if unknown or absent:
        raise ValueError(
            f"the seating must name an agent for each of {', '.join(POWERS)}"
            + (f"; unknown powers: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(absent)}" if absent else "")
        )
    if hero_power not in POWERS:
        raise ValueError(f"hero_power {hero_power!r} is not one of {', '.join(POWERS)}")


def run_rollout(
    cfg: DiplomacyConfig,
    group_idx: int,
    game_idx: int,
    seating: Mapping[str, AgentSpec | str | None],
    hero_power: str,
    *,
    resolver: AgentResolver | None = None,
    save_dir: str | Path | None = None,
    metadata: dict[str, Any] | None = None,
) -> RolloutResult:
    """Play one game to its end (a solo or ``cfg.max_years``) and return its result.

    ``seating``: {power: agent}, all seven powers, each an
    :class:`~leaguezero.diplomacy.game.catalogue.AgentSpec` (a league-table name or None, as a
    script seats bots, is parsed here once); ``hero_power``: the power whose steps are
    recorded. Each seat gets its own policy instance (a bot with its own seed, or
    ``resolver(spec)``). The finished game is saved as saved-game JSON in ``save_dir``
    (default ``cfg.games_dir``; no file when both are None) as
    ``group{group_idx:04d}_game{game_idx:04d}.json``. Raises ``ValueError`` for a bad seating
    and :class:`~leaguezero.diplomacy.game.seats.UnknownAgentError` for an agent nobody can play.
    """
    seats = parse_seating(seating)
    _check_seats(seats, hero_power)
    started = time.perf_counter()
    game_seed = rollout_seed(cfg.run.seed, group_idx, game_idx)
    policies: dict[str, Policy] = {
        power: resolve_agent(seats[power], seat_seed(game_seed, power), resolver)
        for power in POWERS
    }
    env = DiplomacyEnv(max_years=cfg.max_years)
    env.seed = game_seed
    invalid = dict.fromkeys(POWERS, 0)
    missing = dict.fromkeys(POWERS, 0)
    steps: list[HeroStep] = []
    order_history: list[dict[str, Any]] = []
    phase_start: dict[str, dict[str, float]] = {}
    final_year = env.year or 0
    while not env.done:
        final_year = env.year or final_year
        phase_start[env.phase] = running_scores(env.game)
        # The hero's view before anyone orders (orders set during the phase do not change it).
        observation = env.observation(hero_power) if cfg.record_observations else None
        played = play_phase(env, lambda power, _legal: policies[power].get_orders(env, power))
        order_history.append(
            {"phase": played.phase, "orders": {p: s.submitted for p, s in played.seats.items()}}
        )
        for power, seat in played.seats.items():
            invalid[power] += seat.invalid
            missing[power] += seat.missing
        hero = played.seats.get(hero_power)
        if hero is not None:
            steps.append(
                HeroStep(
                    played.phase,
                    observation,
                    hero.legal,
                    hero.answer,
                    hero.submitted,
                    hero.invalid,
                    hero.missing,
                )
            )

    llm_answers = {}
    for power, policy in policies.items():
        if isinstance(policy, ReportsAnswers):
            stats = policy.answer_stats(env, power)
            if stats is not None:
                llm_answers[power] = dict(stats)
    scores = calculate_final_scores(env.game, cfg.win_bonus, cfg.winner_threshold_sc)
    sos = sum_of_squares_scores(env.game, cfg.solo_sc)
    centers = {p: len(env.game.powers[p].centers) for p in POWERS}
    if env.ended_by_cap:
        ended_by = "max_years"
    elif max(centers.values()) >= min(env.game.victory or [cfg.solo_sc]):
        ended_by = "solo"
    else:
        ended_by = "engine"
    result = RolloutResult(
        group_idx=group_idx,
        game_idx=game_idx,
        seed=game_seed,
        hero_power=hero_power,
        power_agents={p: seats[p].name for p in POWERS},
        scores=scores,
        sos_scores=sos,
        centers=centers,
        units={p: len(env.game.powers[p].units) for p in POWERS},
        invalid_orders=invalid,
        missing_orders=missing,
        phases=env.phases_processed,
        final_year=final_year,
        ended_by=ended_by,
        seconds=0.0,
        steps=steps,
        order_history=order_history,
        phase_start=phase_start,
        llm_answers=llm_answers,
    )
    target_dir = save_dir if save_dir is not None else cfg.games_dir
    if target_dir is not None:
        path = Path(target_dir) / f"group{group_idx:04d}_game{game_idx:04d}.json"
        info = {
            "group_idx": group_idx,
            "game_idx": game_idx,
            "seed": game_seed,
            "hero_power": hero_power,
            "power_agents": result.power_agents,
            "scores": scores,
            "sos_scores": sos,
            "invalid_orders": invalid,
            "missing_orders": missing,
            **(metadata or {}),
        }
        result.saved_game = str(env.save(path, info))
    result.seconds = time.perf_counter() - started
    return result
