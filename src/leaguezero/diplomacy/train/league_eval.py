"""The league side of a Diplomacy run: its baselines and session, and the tournament the
league's async evaluator runs.

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
from pathlib import Path
from typing import Any

from leaguezero.diplomacy.agents.resolvers import league_resolver_factory
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bench import suite_gatekeepers
from leaguezero.diplomacy.game.catalogue import BOT_NAMES, BOT_TABLE, seat_spec
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.seats import BASE_MODEL
from leaguezero.league.evaluator import JobRunner
from leaguezero.league.session import LeagueSession
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
    # the run's server: docs/guides/llm.md).
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
    # The league's agents enter the game here: their names parsed once (the resolvers play
    # their files from ``paths``).
    hero = seat_spec(challenger.name)
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
        opponent = seat_spec(keeper.name)
        played = run_tournament(cfg, hero, [opponent], games_per_gatekeeper, resolver=resolver)
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


# The league's fixed opponents: every bot, and the base model second (the registry's order).
BASELINES = (BOT_NAMES[0], BASE_MODEL, *BOT_NAMES[1:])


def evaluation_gatekeepers(cfg: DiplomacyConfig) -> list[str]:
    """The agents every evaluation adds to the league's own picks (random, best, recent): the
    benchmark suite's opponents (:func:`~leaguezero.diplomacy.game.bench.suite_gatekeepers`:
    every bot of ``DEFAULT_SUITE`` and each of ``bench.checkpoints``), always, then with
    ``league.eval_all_baselines`` every other baseline (``base_model``)."""
    keepers = suite_gatekeepers(cfg.bench.checkpoints)
    if cfg.league.eval_all_baselines:
        keepers += BASELINES
    return list(dict.fromkeys(keepers))


def league_baselines(cfg: DiplomacyConfig) -> dict[str, float]:
    """Every baseline of the league with its initial rating: the bots (the suite's among them),
    ``base_model``, and each of ``bench.checkpoints`` (a frozen agent, at ``initial_rating``),
    so that each suite opponent is an agent the evaluator can rate."""
    lcfg = cfg.league
    elo = {bot.name: bot.initial_elo(lcfg) for bot in BOT_TABLE}
    elo[BASE_MODEL] = lcfg.base_model_elo
    baselines = {name: elo[name] for name in BASELINES}  # in the registry's order
    return {**baselines, **{path: cfg.initial_rating for path in cfg.bench.checkpoints}}


def league_session(
    cfg: DiplomacyConfig, run_dir: Path, base_path: str | None, eval_runner: JobRunner | None
) -> LeagueSession:
    """The run's league: the baselines, the evaluator's Diplomacy tournament and its suite."""
    # The suite's frozen agents are league baselines with a file (absolute: the run's
    # paths are relative to the run directory, the config's to where it was started).
    baseline_paths = {path: str(Path(path).resolve()) for path in cfg.bench.checkpoints}
    if base_path is not None:
        baseline_paths[BASE_MODEL] = base_path
    lcfg = cfg.league
    return LeagueSession(
        run_dir,
        lcfg,
        run_name=run_dir.name,
        baselines=league_baselines(cfg),
        anchor="random_bot",
        baseline_paths=baseline_paths,
        tournament=diplomacy_tournament,
        tournament_kwargs={
            "config": cfg.model_dump(mode="json"),
            "games_per_gatekeeper": lcfg.eval_games,
            "greedy": lcfg.eval_greedy,
        },
        eval_summary=diplomacy_evaluation_summary,
        seed=cfg.run.seed,
        extra_gatekeepers=evaluation_gatekeepers(cfg),
        eval_runner=eval_runner,
        tracker_config=cfg.model_dump(mode="json"),
    )
