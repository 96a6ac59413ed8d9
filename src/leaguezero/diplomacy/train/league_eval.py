"""The tournament the league's async evaluator runs for Diplomacy.

A league entry with a ``path`` is a policy checkpoint (the ``base_model`` baseline is the initial
policy saved at step 0) or, in a run with ``train.agent: llm``, a LoRA adapter folder (there
``base_model`` is the base LM without an adapter); entries without a path are the bots. The
agent catalogue resolves them
(:func:`~leaguezero.diplomacy.agents.resolvers.league_resolver_factory`).

:func:`diplomacy_tournament` is handed to :class:`leaguezero.league.evaluator.AsyncEvaluator`,
which calls it in a fresh process: the challenger plays
``games_per_gatekeeper`` games against six clones of each gatekeeper, powers rotated
(:func:`~leaguezero.diplomacy.game.tournament.run_tournament`), and every game becomes one
:class:`~leaguezero.league.types.MatchResult` with the seven powers' final scores.

The gatekeepers always include the fixed benchmark suite's opponents
(:func:`~leaguezero.diplomacy.game.bench.suite_gatekeepers`), and
:func:`diplomacy_evaluation_summary` adds to each ``league.evaluation_finished`` event the
challenger's win rate against each of them and whether it met the entry's floor
(:func:`~leaguezero.diplomacy.game.bench.suite_results`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from leaguezero.diplomacy.agents.resolvers import league_resolver_factory
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.league.types import AgentInfo, MatchResult, Participant

GAME = "diplomacy"


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
    # Policy checkpoints, or adapter folders on the run's base model (in this process, or on
    # the run's server: docs/llm.md).
    make_resolver, close = league_resolver_factory(base)
    try:
        return _play_gatekeepers(
            base,
            challenger,
            gatekeepers,
            paths,
            make_resolver=make_resolver,
            seed=seed,
            games_per_gatekeeper=games_per_gatekeeper,
            greedy=greedy,
            temperature=temperature,
        )
    finally:
        close()


def _play_gatekeepers(
    base: Any,
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    paths: dict[str, str],
    *,
    make_resolver: Any,
    seed: int,
    games_per_gatekeeper: int,
    greedy: bool,
    temperature: float,
) -> list[MatchResult]:
    """Every gatekeeper's games (``make_resolver``: the league agents' resolver factory)."""
    from leaguezero.diplomacy.game.scoring import win_shares
    from leaguezero.diplomacy.game.tournament import run_tournament

    results: list[MatchResult] = []
    for k, keeper in enumerate(gatekeepers):
        cfg = base.model_copy(
            update={
                "run": base.run.model_copy(update={"seed": seed * 1_000 + k}),
                "games_dir": None,
                "record_observations": False,
            }
        )
        resolver = make_resolver(
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


def diplomacy_evaluation_summary(
    results: list[MatchResult], *, config: dict[str, Any] | None = None, **_: Any
) -> dict[str, Any]:
    """The evaluation's record against the benchmark suite (``DEFAULT_SUITE`` plus the config's
    ``bench.checkpoints``), for ``league.evaluation_finished``: ``suite`` (one row per opponent,
    :func:`~leaguezero.diplomacy.game.bench.suite_results`), ``suite_passed`` (every opponent
    played and passed), ``suite_max_years`` (the games' length) and ``suite_informational``
    (always true: an evaluation plays few games, often shorter ones than ``bench``, so the
    pass marks are a trend to watch, not the benchmark's verdict)."""
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.bench import suite_results, suite_with_checkpoints

    cfg = DiplomacyConfig.model_validate(config or {})
    wins: dict[str, list[float]] = defaultdict(list)
    for result in results:
        keeper, win = result.meta.get("gatekeeper"), result.meta.get("hero_win")
        if keeper is not None and win is not None:
            wins[str(keeper)].append(float(win))
    rows = suite_results(suite_with_checkpoints(cfg.bench.checkpoints), wins)
    return {
        "suite": rows,
        "suite_passed": all(row["passed"] is True for row in rows),
        "suite_max_years": cfg.max_years,
        "suite_informational": True,
    }
