"""League self-play: the hero against sampled league opponents, many games in lockstep.

A variant of :func:`leaguezero.yatzy.train.selfplay.slots.play_selfplay` for league training.
Every game
seats the hero (the current best net, searched with root noise and temperature exactly as in
self-play) against one opponent drawn for that game (``sample(game_index)``, PFSP in practice):

- a **mirror** draw (the hero itself) is ordinary self-play: both seats are searched by the
  hero's evaluator in the same batch. With ``league.mirror_both_seats`` (default) both seats'
  decisions enter replay — both are the searched hero with exploration, i.e. exactly the data of
  plain self-play, so the 30% mirror share costs no sample efficiency;
- any other draw (a past checkpoint, ``base_model``, ``random``, ``greedy``, ``oracle``) plays
  its seat itself, and **only the hero's decisions enter replay**. The opponent's moves are not
  the hero's policy (a bot, an old net, or no search at all), so training on them would teach
  the hero to imitate its opponents.

The hero sits in seat ``game_index % 2``, so it plays both seats equally. Each round, all hero
decisions of all games are searched in one :class:`~leaguezero.az.search.LockstepSearch` call
(one evaluator batch per simulation round) and the opponents' decisions are batched per
opponent (one ``act`` call per distinct opponent over all its games). Value targets are the
game result from the recorded mover's view, as in self-play.

Resumable like self-play: games in complete shards count as done and game ``i`` always draws
the same opponent (``sample`` is keyed by the game index). Each finished game becomes one
``kind="training"`` :class:`~leaguezero.league.types.MatchResult` handed to ``on_games`` at
once, its ``meta["game"]`` the game's place in finishing order (the order the shards hold
games in) and ``meta["worker"]`` the worker: after a kill the log may hold games the replay
lost with the shard being written, and a resumed run drops those whose place is at or past the
games on disk (:func:`drop_unplayed`) before it plays them again, so the match log and the
replay agree exactly.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from leaguezero.az.evaluator import Evaluator
from leaguezero.az.replay import ShardWriter, games_on_disk
from leaguezero.common.events import EventWriter
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import Draw
from leaguezero.league.types import MatchResult, OpponentType, Participant
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import (
    S_PLAYER,
    apply_actions_batch,
)
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.puct import PuctHero
from leaguezero.yatzy.train.selfplay.slots import (
    HeroFactory,
    OracleValues,
    SelfPlayStats,
    resume_point,
    run_slots,
)


@dataclass
class LeagueSelfPlayStats(SelfPlayStats):
    """Self-play statistics plus who the hero met and how it fared (from the hero's view)."""

    hero: str = ""
    opponent_decisions: int = 0
    opponents: dict[str, int] = field(default_factory=dict)  # games per opponent
    buckets: dict[str, int] = field(default_factory=dict)  # games per PFSP bucket
    opponent_types: dict[str, int] = field(default_factory=dict)  # games per OpponentType
    hero_win_rate_by_type: dict[str, float] = field(default_factory=dict)  # draw = half
    hero_win_rate_by_opponent: dict[str, float] = field(default_factory=dict)
    hero_mean_score: float = math.nan


def drop_unplayed(matchlog: MatchLog, step: int, out_dir: str | Path, worker: int = 0) -> int:
    """Take ``worker``'s training games of ``step`` that are logged but not in ``out_dir``'s
    complete shards out of ``matchlog`` (a kill lost them with the shard being written; the
    resumed self-play plays them again); returns how many. The caller holds the writers' lock.
    Games logged before ``meta["game"]`` existed are kept."""
    on_disk = games_on_disk(out_dir, worker)

    def lost(result: MatchResult) -> bool:
        return result.meta.get("worker", 0) == worker and result.meta.get("game", -1) >= on_disk

    return matchlog.drop(kind="training", min_step=step, max_step=step, where=lost)


def run_league_selfplay(
    cfg: YatzyConfig,
    evaluator: Evaluator,
    out_dir: str | Path,
    *,
    settings: SearchSettings,
    games: int,
    seed: int,
    hero: str,
    sample: Callable[[int], Draw],
    agent_for: Callable[[str], Agent],
    step: int = 0,
    on_games: Callable[[list[MatchResult]], None] | None = None,
    worker: int = 0,
    roots_log: EventWriter | None = None,
    oracle_values: OracleValues | None = None,
    progress: Callable[[int], None] | None = None,
    hero_factory: HeroFactory = PuctHero,
) -> LeagueSelfPlayStats:
    """Play ``games`` league games (hero vs ``sample(i)``'s opponent) into replay shards.

    ``evaluator`` is the hero's network (batched); ``agent_for(name)`` returns the match agent
    of a non-mirror opponent (callers cache them); ``hero`` is the hero's league name (it fills
    both seats of mirror games in the match log); ``step`` is the hero's training step, stamped
    on the match results. Other arguments (``hero_factory``: the hero's search, PUCT or the
    turn search) as in :func:`~leaguezero.yatzy.train.selfplay.slots.play_selfplay`.
    """
    # Over 80 lines: the slot callbacks below share the per-slot arrays as closures (one
    # game loop's state); a class would only rename them.
    out_dir, done_before, remaining = resume_point(out_dir, worker, games, progress)
    rng = np.random.default_rng([seed, worker, done_before, 0x1EA6])
    num_slots = max(1, min(cfg.selfplay.concurrent_games, remaining))
    player = hero_factory(
        cfg, settings, evaluator, num_slots, int(rng.integers(2**62)), roots_log, oracle_values
    )  # searches the hero's decisions and records those that enter replay
    writer = ShardWriter(
        out_dir, player.schema, worker=worker, shard_samples=cfg.selfplay.shard_samples,
        extra_meta={"league": True, "hero": hero},
    )  # fmt: skip
    record_mirror_both = cfg.league.mirror_both_seats

    hero_seat = np.zeros(num_slots, np.int64)  # [G]
    mirror = np.zeros(num_slots, np.bool_)  # [G]
    opponent = np.empty(num_slots, dtype=object)  # [G] opponent name per slot
    draws: list[Draw | None] = [None] * num_slots

    opponent_decisions = 0
    hero_scores: list[int] = []
    points: dict[str, list[float]] = {}  # opponent name -> hero results
    type_points: dict[str, list[float]] = {}
    buckets: Counter[str] = Counter()
    finished = done_before  # the next finished game's place in the shards' order

    def on_start(slot: int, started: int) -> None:
        index = done_before + started
        draw = sample(index)
        draws[slot] = draw
        mirror[slot] = draw.opponent_type == OpponentType.SELF
        opponent[slot] = draw.opponent
        hero_seat[slot] = index % 2

    def release(results: list[MatchResult]) -> None:
        if on_games is not None and results:
            on_games(results)

    def move(states: np.ndarray, rows_all: np.ndarray) -> None:
        nonlocal opponent_decisions
        movers_all = states[rows_all, S_PLAYER]
        hero_turn = mirror[rows_all] | (movers_all == hero_seat[rows_all])
        rows = rows_all[hero_turn]  # searched by the hero
        opp_rows = rows_all[~hero_turn]  # played by the opponents, never recorded
        if rows.size:
            # Mirror games record both seats only when configured; the hero's seat always.
            movers_now = states[rows, S_PLAYER]
            keep = (movers_now == hero_seat[rows]) | (mirror[rows] & record_mirror_both)
            apply_actions_batch(states, rows, player.act(states, rows, keep, rng))
        if opp_rows.size:
            names = opponent[opp_rows]
            for name in dict.fromkeys(names.tolist()):  # one batched call per opponent
                group = opp_rows[names == name]
                actions = np.asarray(agent_for(name).act(states, group), dtype=np.int64)
                apply_actions_batch(states, group, actions)
            opponent_decisions += int(opp_rows.size)

    def on_end(slot: int, final: np.ndarray) -> None:
        nonlocal finished
        draw = draws[slot]
        assert draw is not None
        h = int(hero_seat[slot])
        hero_result = 1.0 if final[h] > final[1 - h] else 0.5 if final[h] == final[1 - h] else 0.0
        seat_agents = {h: hero, 1 - h: hero if mirror[slot] else str(opponent[slot])}
        result = MatchResult(
            participants=tuple(Participant(seat_agents[s], s, float(final[s])) for s in (0, 1)),
            step=step,
            timestamp=time.time(),
            game="yatzy",
            kind="training",
            meta={
                "hero_seat": h,
                "bucket": draw.bucket.value,
                "opponent_type": draw.opponent_type.value,
                "opponent": draw.opponent,
                "game": finished,
                "worker": worker,
            },
        )
        finished += 1
        release([result])
        hero_scores.append(int(final[h]))
        points.setdefault(draw.opponent, []).append(hero_result)
        type_points.setdefault(draw.opponent_type.value, []).append(hero_result)
        buckets[draw.bucket.value] += 1

    totals = run_slots(
        player, writer, rng, num_slots, remaining, move, on_start=on_start, on_end=on_end,
        progress=progress,
    )  # fmt: skip
    return LeagueSelfPlayStats(
        **player.stats_fields(
            totals.finished, totals.samples, totals.seconds, totals.scores, totals.seat0_points
        ),
        hero=hero,
        opponent_decisions=opponent_decisions,
        opponents={name: len(v) for name, v in points.items()},
        buckets=dict(buckets),
        opponent_types={name: len(v) for name, v in type_points.items()},
        hero_win_rate_by_type={name: float(np.mean(v)) for name, v in type_points.items()},
        hero_win_rate_by_opponent={name: float(np.mean(v)) for name, v in points.items()},
        hero_mean_score=float(np.mean(hero_scores)) if hero_scores else math.nan,
    )
