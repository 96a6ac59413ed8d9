"""Yatzy agents for league entries, and the tournament the async league evaluator runs.

League agents are named in ``league.json``: the bots ``random``, ``greedy`` and ``oracle`` have
no path; ``base_model`` (the untrained initial net) and every checkpoint have a checkpoint path.
:func:`build_league_agent` turns an entry into a match agent through the agent catalogue
(:mod:`leaguezero.yatzy.agents.registry`).

:func:`yatzy_tournament` is the tournament function the league passes to
:class:`leaguezero.league.evaluator.AsyncEvaluator`, which runs it in a fresh process: the
challenger plays paired, side-swapped games
(:func:`leaguezero.yatzy.agents.match.play_match`) against
each gatekeeper, and every game becomes one :class:`leaguezero.league.types.MatchResult` with
the two seats' final scores.
"""

from __future__ import annotations

import os
from pathlib import Path

from leaguezero.league.types import AgentInfo, MatchResult, Participant
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.agents.registry import BOT_NAMES, AgentSpec, build_agent
from leaguezero.yatzy.search.settings import SearchSettings

GAME = "yatzy"


def build_league_agent(
    info: AgentInfo,
    *,
    settings: SearchSettings | None = None,
    seed: int = 0,
    oracle=None,
    oracle_table: str | os.PathLike | None = None,
    resolve=None,
) -> Agent:
    """The match agent for a league entry.

    An entry with a ``path`` is a network checkpoint, played in evaluation mode with
    ``settings`` (default: the config defaults with ``sims=0``, the raw policy's most probable
    legal move for a PUCT network). Entries without
    a path must be one of the bots ``random``/``greedy``/``oracle``; ``oracle`` reuses a loaded
    ``oracle`` object when given, else loads ``oracle_table`` (or the cached table). ``resolve``
    maps a relative path to a filesystem path (``LeagueRegistry.resolve``). Raises
    ``ValueError`` for an unknown bot and ``FileNotFoundError`` for a missing checkpoint.
    """
    if info.path is None and info.name not in BOT_NAMES:
        raise ValueError(
            f"league agent {info.name!r} has no checkpoint path and is not one of the Yatzy bots "
            f"{', '.join(BOT_NAMES)}; fix league.json"
        )
    path = None if info.path is None else Path(resolve(info.path) if resolve else info.path)
    if path is not None:
        settings = settings or SearchSettings().evaluation(0)
    spec = AgentSpec(info.name, path)
    return build_agent(
        spec, seed=seed, settings=settings, oracle=oracle, oracle_table=oracle_table,
        name=info.name,
    )  # fmt: skip


def yatzy_tournament(
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    *,
    seed: int,
    games_per_opponent: int = 40,
    search: dict | None = None,
    oracle_table: str | None = None,
) -> list[MatchResult]:
    """The challenger against each gatekeeper: ``games_per_opponent`` paired games each.

    Both games of a pair share an episode seed with the seats swapped (dice keyed by seat), so
    luck cancels within a pair. Returns one result per game; ``meta`` holds the pair's episode
    seed and the challenger's seat. Checkpoints search with ``search``
    (:meth:`SearchSettings.to_dict` of the run's settings at ``league.eval_sims``; default: the
    config defaults with sims 0 = the raw policy).
    """
    import torch

    from leaguezero.yatzy.agents.match import play_match

    torch.set_num_threads(1)  # the evaluator shares the machine with the trainer
    settings = SearchSettings.from_dict(search) if search else None
    hero = build_league_agent(challenger, settings=settings, seed=seed, oracle_table=oracle_table)
    results: list[MatchResult] = []
    for k, keeper in enumerate(gatekeepers):
        opponent = build_league_agent(
            keeper, settings=settings, seed=seed + k, oracle_table=oracle_table
        )
        match_seed = seed * 1_000 + k
        played = play_match(hero, opponent, games_per_opponent, match_seed)
        for pair, episode in enumerate(played.seeds.tolist()):
            for hero_seat in (0, 1):
                hero_score = int(played.a_scores[pair, hero_seat])
                keeper_score = int(played.b_scores[pair, hero_seat])
                seats = {hero_seat: (challenger.name, hero_score)}
                seats[1 - hero_seat] = (keeper.name, keeper_score)
                results.append(
                    MatchResult(
                        participants=tuple(
                            Participant(agent=seats[s][0], seat=s, score=seats[s][1])
                            for s in (0, 1)
                        ),
                        game=GAME,
                        meta={"episode_seed": episode, "challenger_seat": hero_seat},
                    )
                )
    return results
