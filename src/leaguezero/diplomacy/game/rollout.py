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
from leaguezero.diplomacy.game.phase import PlayedPhase, play_phase
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


@dataclass
class _PlayedPhases:
    """What :func:`run_rollout` keeps of the phases played: each power's invalid and missing
    orders, the hero's steps and every phase's submitted orders."""

    hero_power: str
    invalid: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POWERS, 0))
    missing: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POWERS, 0))
    steps: list[HeroStep] = field(default_factory=list)
    order_history: list[dict[str, Any]] = field(default_factory=list)

    def add(self, played: PlayedPhase, observation: dict[str, Any] | None) -> None:
        """Count and keep one resolved phase (``observation``: the hero's, or None)."""
        orders = {power: seat.submitted for power, seat in played.seats.items()}
        self.order_history.append({"phase": played.phase, "orders": orders})
        for power, seat in played.seats.items():
            self.invalid[power] += seat.invalid
            self.missing[power] += seat.missing
        hero = played.seats.get(self.hero_power)
        if hero is not None:
            step = (hero.legal, hero.answer, hero.submitted, hero.invalid, hero.missing)
            self.steps.append(HeroStep(played.phase, observation, *step))


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
    played = _PlayedPhases(hero_power)
    phase_start: dict[str, dict[str, float]] = {}
    final_year = env.year or 0
    while not env.done:
        final_year = env.year or final_year
        phase_start[env.phase] = running_scores(env.game)
        # The hero's view before anyone orders (orders set during the phase do not change it).
        observation = env.observation(hero_power) if cfg.record_observations else None
        phase = play_phase(env, lambda power, _legal: policies[power].get_orders(env, power))
        played.add(phase, observation)

    scores = calculate_final_scores(env.game, cfg.win_bonus, cfg.winner_threshold_sc)
    sos = sum_of_squares_scores(env.game, cfg.solo_sc)
    centers = {p: len(env.game.powers[p].centers) for p in POWERS}
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
        invalid_orders=played.invalid,
        missing_orders=played.missing,
        phases=env.phases_processed,
        final_year=final_year,
        ended_by=_ended_by(env, centers, cfg.solo_sc),
        seconds=0.0,
        steps=played.steps,
        order_history=played.order_history,
        phase_start=phase_start,
        llm_answers=_answer_stats(env, policies),
    )
    target_dir = save_dir if save_dir is not None else cfg.games_dir
    if target_dir is not None:
        path = Path(target_dir) / f"group{group_idx:04d}_game{game_idx:04d}.json"
        result.saved_game = str(env.save(path, _saved_game_info(result, metadata)))
    result.seconds = time.perf_counter() - started
    return result


def _ended_by(env: DiplomacyEnv, centers: dict[str, int], solo_sc: int) -> str:
    """``"max_years"``, ``"solo"`` or ``"engine"``: what ended the finished game in ``env``."""
    if env.ended_by_cap:
        return "max_years"
    if max(centers.values()) >= min(env.game.victory or [solo_sc]):
        return "solo"
    return "engine"


def _answer_stats(env: DiplomacyEnv, policies: dict[str, Policy]) -> dict[str, dict[str, int]]:
    """The LLM seats' own answer counts (:class:`~leaguezero.diplomacy.game.seats.ReportsAnswers`),
    {power: counts}, for the seats whose policy keeps them."""
    answers = {}
    for power, policy in policies.items():
        if isinstance(policy, ReportsAnswers):
            stats = policy.answer_stats(env, power)
            if stats is not None:
                answers[power] = dict(stats)
    return answers


def _saved_game_info(result: RolloutResult, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The ``leaguezero`` block's metadata of a saved rollout: who sat where, how it scored."""
    return {
        "group_idx": result.group_idx,
        "game_idx": result.game_idx,
        "seed": result.seed,
        "hero_power": result.hero_power,
        "power_agents": result.power_agents,
        "scores": result.scores,
        "sos_scores": result.sos_scores,
        "invalid_orders": result.invalid_orders,
        "missing_orders": result.missing_orders,
        **(metadata or {}),
    }
