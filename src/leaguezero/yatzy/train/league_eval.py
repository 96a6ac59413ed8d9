"""Yatzy agents for league entries, and the tournament the async league evaluator runs.

League agents are named in ``league.json``: the bots ``random``, ``greedy`` and ``oracle`` have
no path; ``base_model`` (the untrained initial net) and every checkpoint have a checkpoint path.
:func:`build_league_agent` turns an entry into a match agent (:mod:`leaguezero.yatzy.agents.base`).

:func:`yatzy_tournament` is called by :class:`leaguezero.league.evaluator.AsyncEvaluator` in a
fresh process (by its import path ``leaguezero.yatzy.train.league_eval:yatzy_tournament``): the
challenger plays paired, side-swapped games
(:func:`leaguezero.yatzy.agents.match.play_match`) against
each gatekeeper, and every game becomes one :class:`leaguezero.league.types.MatchResult` with
the two seats' final scores.
"""

from __future__ import annotations

import os
from pathlib import Path

from leaguezero.league.types import AgentInfo, MatchResult, Participant
from leaguezero.yatzy.agents.base import Agent, GreedyAgent, RandomAgent

TOURNAMENT = "leaguezero.yatzy.train.league_eval:yatzy_tournament"
BOT_NAMES = ("random", "greedy", "oracle")
GAME = "yatzy"


def build_league_agent(
    info: AgentInfo,
    *,
    sims: int = 0,
    seed: int = 0,
    oracle=None,
    oracle_table: str | os.PathLike | None = None,
    resolve=None,
) -> Agent:
    """The match agent for a league entry.

    An entry with a ``path`` is a network checkpoint, played with ``sims`` simulations per
    decision in evaluation mode (0: the raw policy's most probable legal move). Entries without
    a path must be one of the bots ``random``/``greedy``/``oracle``; ``oracle`` reuses a loaded
    ``oracle`` object when given, else loads ``oracle_table`` (or the cached table). ``resolve``
    maps a relative path to a filesystem path (``LeagueRegistry.resolve``). Raises
    ``ValueError`` for an unknown bot and ``FileNotFoundError`` for a missing checkpoint.
    """
    if info.path is not None:
        from leaguezero.yatzy.agents.model import ModelAgent

        path = Path(resolve(info.path) if resolve is not None else info.path)
        agent = ModelAgent.from_spec(str(path), seed=seed, sims=sims)
        agent.name = info.name
        return agent
    if info.name == "random":
        return RandomAgent(seed=seed)
    if info.name == "greedy":
        return GreedyAgent()
    if info.name == "oracle":
        from leaguezero.yatzy.agents.oracle import OracleAgent

        return OracleAgent(table_path=oracle_table, oracle=oracle)
    raise ValueError(
        f"league agent {info.name!r} has no checkpoint path and is not one of the Yatzy bots "
        f"{', '.join(BOT_NAMES)}; fix league.json"
    )


def yatzy_tournament(
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    *,
    seed: int,
    games_per_opponent: int = 40,
    sims: int = 0,
    oracle_table: str | None = None,
) -> list[MatchResult]:
    """The challenger against each gatekeeper: ``games_per_opponent`` paired games each.

    Both games of a pair share an episode seed with the seats swapped (dice keyed by seat), so
    luck cancels within a pair. Returns one result per game; ``meta`` holds the pair's episode
    seed and the challenger's seat. Checkpoints search with ``sims`` simulations (0 = policy).
    """
    import torch

    from leaguezero.yatzy.agents.match import play_match

    torch.set_num_threads(1)  # the evaluator shares the machine with the trainer
    hero = build_league_agent(challenger, sims=sims, seed=seed, oracle_table=oracle_table)
    results: list[MatchResult] = []
    for k, keeper in enumerate(gatekeepers):
        opponent = build_league_agent(keeper, sims=sims, seed=seed + k, oracle_table=oracle_table)
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
