"""Diplomacy league agents from checkpoint paths, and the tournament the async evaluator runs.

A league entry with a ``path`` is a policy checkpoint (:func:`~.policy.load_policy`; the
``base_model`` baseline is the initial policy saved at step 0) or, in a run with
``train.agent: llm``, a LoRA adapter folder (:func:`~.llm.league.adapter_resolver`; there
``base_model`` is the base LM without an adapter); entries without a path are the
bots (``random_bot``, ``chaos_bot``, ``greedy_bot``). :func:`checkpoint_resolver` turns a
{name: path} map into the rollout's :data:`~leaguezero.diplomacy.game.seats.AgentResolver`.

:func:`diplomacy_tournament` is called by :class:`leaguezero.league.evaluator.AsyncEvaluator`
in a fresh process by its import path (:data:`TOURNAMENT`): the challenger plays
``games_per_gatekeeper`` games against six clones of each gatekeeper, powers rotated
(:func:`~leaguezero.diplomacy.game.tournament.run_tournament`), and every game becomes one
:class:`~leaguezero.league.types.MatchResult` with the seven powers' final scores.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.seats import AgentResolver, UnknownAgentError
from leaguezero.league.types import AgentInfo, MatchResult, Participant

TOURNAMENT = "leaguezero.diplomacy.train.league_eval:diplomacy_tournament"
GAME = "diplomacy"


def checkpoint_resolver(
    paths: Mapping[str, str | Path],
    *,
    seed: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
) -> AgentResolver:
    """A resolver that plays each named checkpoint with a fresh, seeded actor per seat.

    Each checkpoint is loaded once; every call (one per seat) gets its own actor with the next
    seed, so clones of one agent do not share a random stream. Raises ``UnknownAgentError`` for
    a name not in ``paths``.
    """
    from leaguezero.diplomacy.agents.policy import load_policy

    loaded: dict[str, Any] = {}
    counter = itertools.count()

    def resolve(name: str | None) -> Any:
        key = "base_model" if name is None else name
        if key not in paths:
            raise UnknownAgentError(f"no checkpoint for agent {key!r}")
        if key not in loaded:
            loaded[key] = load_policy(paths[key])
        return loaded[key].actor(
            seed=seed * 1_000_003 + next(counter), temperature=temperature, greedy=greedy
        )

    return resolve


def diplomacy_tournament(
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    *,
    seed: int,
    config: dict[str, Any] | None = None,
    games_per_gatekeeper: int = 7,
    greedy: bool = True,
    temperature: float = 1.0,
) -> list[MatchResult]:
    """The challenger against six clones of each gatekeeper (see the module doc).

    ``config`` is a ``DiplomacyConfig`` as a dict (game length, scoring); games are not saved.
    ``meta`` of each result holds the gatekeeper, the challenger's power and its win share.
    """
    import torch

    from leaguezero.diplomacy.config import DiplomacyConfig

    torch.set_num_threads(1)  # the evaluator shares the machine with the trainer
    base = DiplomacyConfig.model_validate(config or {})
    paths = {a.name: a.path for a in [challenger, *gatekeepers] if a.path is not None}
    make_llm_resolver, close = None, None
    if base.train.agent == "llm":  # league entries are adapter folders on one base model
        from leaguezero.diplomacy.llm.league import evaluation_resolver_factory

        # hf: the base model in this process; openai: the run's server (docs/llm.md).
        make_llm_resolver, close = evaluation_resolver_factory(base.llm)
    try:
        return _play_gatekeepers(
            base,
            challenger,
            gatekeepers,
            paths,
            make_llm_resolver=make_llm_resolver,
            seed=seed,
            games_per_gatekeeper=games_per_gatekeeper,
            greedy=greedy,
            temperature=temperature,
        )
    finally:
        if close is not None:
            close()


def _play_gatekeepers(
    base: Any,
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    paths: dict[str, str],
    *,
    make_llm_resolver: Any,
    seed: int,
    games_per_gatekeeper: int,
    greedy: bool,
    temperature: float,
) -> list[MatchResult]:
    """Every gatekeeper's games (``make_llm_resolver``: LLM agents' resolver factory, or None
    for policy checkpoints)."""
    from leaguezero.diplomacy.game.scoring import win_shares
    from leaguezero.diplomacy.game.tournament import run_tournament

    results: list[MatchResult] = []
    for k, keeper in enumerate(gatekeepers):
        cfg = base.model_copy(
            update={"seed": seed * 1_000 + k, "games_dir": None, "record_observations": False}
        )
        if make_llm_resolver is not None:
            resolver = make_llm_resolver(
                paths, seed=seed * 1_000 + k, greedy=greedy, temperature=temperature
            )
        else:
            resolver = checkpoint_resolver(
                paths, seed=seed * 1_000 + k, greedy=greedy, temperature=temperature
            )
        played = run_tournament(
            cfg, challenger.name, [keeper.name], games_per_gatekeeper, resolver=resolver
        )
        for game in played.games:
            shares = win_shares(game.scores)
            results.append(
                MatchResult(
                    participants=tuple(
                        Participant(game.power_agents[p], p, game.scores[p]) for p in POWERS
                    ),
                    game=GAME,
                    meta={
                        "gatekeeper": keeper.name,
                        "hero_power": game.hero_power,
                        "hero_win": shares[game.hero_power],
                        "hero_score": game.scores[game.hero_power],
                        "seed": game.seed,
                        "final_year": game.final_year,
                    },
                )
            )
    return results
