"""The self-play game-slot loop shared by both search kinds, and the hero it drives.

Many games run in lockstep per worker: every active game needs a decision at every round (someone
is always to move), so one hero call searches all of them with one batched evaluation per round.
A finished game's decisions become replay samples at once (whole games per shard add, so a killed
worker loses at most the games in flight) and its slot starts a new game. The hero is a
:class:`SelfPlayHero`: the PUCT search's
(:class:`leaguezero.yatzy.train.selfplay.puct.PuctHero`) or the turn search's
(:class:`leaguezero.yatzy.train.selfplay.turn.TurnHero`). League play
(:mod:`leaguezero.yatzy.train.league.play`) drives the same loop with opponents in some seats.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from leaguezero.az.evaluator import Evaluator
from leaguezero.az.replay import Batch, ShardSchema, ShardWriter, games_on_disk
from leaguezero.common.events import EventWriter
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import (
    DICE_RNG,
    S_SCORE,
    STATE_LEN,
    apply_actions_batch,
    new_match,
    terminal_mask,
)
from leaguezero.yatzy.search.settings import SearchSettings

PROTOCOL_VERSION = 1  # replay shard protocol of both search kinds

OracleValues = Callable[[np.ndarray], np.ndarray]  # states [N, 16] -> values [N, 47] (NaN)


class SelfPlayHero(Protocol):
    """The searching side of a slot loop: it plays every seat in self-play and the hero's seats in
    league play, records its decisions and turns a finished game into replay samples."""

    schema: ShardSchema  # the replay shards its samples go to

    def start(self, slot: int) -> None:
        """A new game begins in ``slot``."""

    def act(
        self, states: np.ndarray, rows: np.ndarray, record: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Search ``states[rows]``; record the decisions where ``record`` (bool [n]); return the
        moves to play (int64 [n], not applied)."""

    def game_batch(self, slot: int, final: np.ndarray) -> Batch:
        """The replay samples of the finished game in ``slot`` (final scores ``final`` [2])."""

    def stats_fields(
        self, games: int, samples: int, seconds: float, scores: list[int], seat0_points: float
    ) -> dict[str, float | int]:
        """The :class:`SelfPlayStats` fields of a finished self-play call."""


# (cfg, settings, evaluator, num_slots, seed, roots_log, oracle)
HeroFactory = Callable[..., SelfPlayHero]


@dataclass
class SelfPlayStats:
    games: int
    decisions: int
    samples: int
    sims: int
    evals: int
    fallbacks: int
    collisions: int
    seconds: float
    evaluate_seconds: float
    sims_per_s: float
    decisions_per_s: float
    mean_score: float
    seat0_win_rate: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def resume_point(
    out_dir: str | Path, worker: int, games: int, progress: Callable[[int], None] | None
) -> tuple[Path, int, int]:
    """(folder, games already on disk for ``worker``, games still to play); reports the former."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done_before = games_on_disk(out_dir, worker)
    if progress is not None and done_before:
        progress(min(done_before, games))
    return out_dir, done_before, max(0, games - done_before)


def play_selfplay(
    cfg: YatzyConfig,
    evaluator: Evaluator,
    out_dir: str | Path,
    *,
    settings: SearchSettings,
    games: int,
    seed: int,
    worker: int = 0,
    roots_log: EventWriter | None = None,
    oracle_values: OracleValues | None = None,
    progress: Callable[[int], None] | None = None,
    hero_factory: HeroFactory,
) -> SelfPlayStats:
    """Play ``games`` self-play games into replay shards under ``out_dir``.

    Resumable: games already in complete shards of this ``worker`` count towards ``games``.
    ``roots_log`` receives a sampled ``mcts_root`` event per ``selfplay.root_log_rate``
    (with the oracle's best action and the regret of the chosen one if ``oracle_values``).
    ``progress(n)`` is called with the number of games finished at each step. ``hero_factory``
    builds the searcher of both seats (a :class:`SelfPlayHero`) with ``settings`` (the run's
    search, built once where the command started).
    """
    out_dir, done_before, remaining = resume_point(out_dir, worker, games, progress)
    rng = np.random.default_rng([seed, worker, done_before])
    num_slots = max(1, min(cfg.selfplay.concurrent_games, remaining))
    hero = hero_factory(
        cfg, settings, evaluator, num_slots, int(rng.integers(2**62)), roots_log, oracle_values
    )
    writer = ShardWriter(
        out_dir, hero.schema, worker=worker, shard_samples=cfg.selfplay.shard_samples
    )

    def move(states: np.ndarray, rows: np.ndarray) -> None:  # the hero plays both seats
        record = np.ones(len(rows), np.bool_)
        apply_actions_batch(states, rows, hero.act(states, rows, record, rng))

    totals = run_slots(hero, writer, rng, num_slots, remaining, move, progress=progress)
    return SelfPlayStats(
        **hero.stats_fields(
            totals.finished, totals.samples, totals.seconds, totals.scores, totals.seat0_points
        )
    )


@dataclass
class SlotTotals:
    """What :func:`run_slots` counted: finished games, samples written, both seats' final
    scores, seat 0's points (win 1, draw 0.5) and the wall time of the loop."""

    finished: int = 0
    samples: int = 0
    scores: list[int] = field(default_factory=list)
    seat0_points: float = 0.0
    seconds: float = 0.0


def run_slots(
    hero: SelfPlayHero,
    writer: ShardWriter,
    rng: np.random.Generator,
    num_slots: int,
    remaining: int,
    move: Callable[[np.ndarray, np.ndarray], None],
    *,
    on_start: Callable[[int, int], None] | None = None,
    on_end: Callable[[int, np.ndarray], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> SlotTotals:
    """The self-play game-slot loop (self-play and league play alike): ``num_slots`` games in
    lockstep until ``remaining`` games have finished, a new game starting in each freed slot.

    Each round ``move(states, rows)`` plays (and applies) one decision of every active game
    ``rows``; a finished game's replay samples (``hero.game_batch``) go to ``writer``.
    ``on_start(slot, n)`` runs before the ``n``-th game of this call starts in ``slot`` (before
    its dice are seeded from ``rng``), ``on_end(slot, final)`` after its samples were added,
    ``progress(1)`` once per finished game. The caller flushes nothing: ``writer`` is flushed
    here.
    """
    states = np.zeros((num_slots, STATE_LEN), np.int64)
    active = np.zeros(num_slots, np.bool_)
    done = np.zeros(num_slots, np.bool_)
    totals = SlotTotals()
    started = 0

    def start_game(slot: int) -> None:
        nonlocal started
        if on_start is not None:
            on_start(slot, started)
        new_match(states[slot], int(rng.integers(0, 2**62)), DICE_RNG)
        active[slot] = True
        hero.start(slot)
        started += 1

    for slot in range(num_slots):
        if started < remaining:
            start_game(slot)

    t0 = time.perf_counter()
    while active.any():
        move(states, np.flatnonzero(active).astype(np.int64))
        terminal_mask(states, done)
        for slot in np.flatnonzero(done & active):
            final = states[slot, S_SCORE : S_SCORE + 2]
            batch = hero.game_batch(slot, final)
            writer.add(batch, games=1)
            totals.samples += len(batch)
            if on_end is not None:
                on_end(slot, final)
            totals.scores.extend(int(v) for v in final)
            totals.seat0_points += (
                1.0 if final[0] > final[1] else 0.5 if final[0] == final[1] else 0.0
            )
            totals.finished += 1
            active[slot] = False
            if started < remaining:
                start_game(slot)
            if progress is not None:
                progress(1)
    writer.flush()
    totals.seconds = time.perf_counter() - t0
    return totals
