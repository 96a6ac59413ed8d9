"""Paired, side-swapped 2-player matches between agents, played in lockstep batches.

For pair ``i`` both games use the episode seed ``seeds[i]``; agent A sits in seat 0 in the first
game and in seat 1 in the second. Dice are keyed by seat (``DICE_KEYED``), so each seat sees the
same dice in both games, and two copies of one deterministic agent score exactly 0.5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from leaguezero.common.stats import PairedSummary, paired_summary
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    S_PLAYER,
    S_SCORE,
    STATE_LEN,
    apply_actions_batch,
    new_matches,
    terminal_mask,
)

MAX_DECISIONS = 30 * 3  # 15 rounds x 2 players x at most 3 decisions


def episode_seeds(seed: int, pairs: int) -> np.ndarray:
    """The episode seeds (int64 [pairs], < 2**62) of a match: a pure function of ``seed``."""
    return np.random.default_rng(seed).integers(0, 2**62, size=pairs, dtype=np.int64)


@dataclass
class MatchResult:
    summary: PairedSummary
    seeds: np.ndarray  # int64 [pairs]
    a_scores: np.ndarray  # int64 [pairs, 2] (column 0: A in seat 0)
    b_scores: np.ndarray  # int64 [pairs, 2]
    actions: list[list[int]] = field(default_factory=list)  # per game, if recorded
    final_states: np.ndarray | None = None  # int64 [games, STATE_LEN]; game 2i has A in seat 0


def play_match(
    agent_a: Agent,
    agent_b: Agent,
    games: int,
    seed: int,
    *,
    record_actions: bool = False,
    progress: Callable[[int], None] | None = None,
    seeds: np.ndarray | None = None,
    on_decision: Callable[[bool, np.ndarray, np.ndarray], None] | None = None,
) -> MatchResult:
    """Play ``games`` games (rounded up to an even number: pairs of side-swapped games).

    ``seeds`` (int64 [pairs]) overrides the episode seeds derived from ``seed`` (gating uses a
    persisted seed set). ``progress`` (if given) is called with the number of decisions made in
    each step; ``on_decision(is_a, states [n, 16], actions [n])`` sees every decision before it
    is applied (diagnostics such as oracle regret).
    """
    if seeds is None:
        if games < 1:
            raise ValueError("games must be at least 1")
        pairs = (games + 1) // 2
        seeds = episode_seeds(seed, pairs)
    else:
        seeds = np.asarray(seeds, dtype=np.int64)
        pairs = len(seeds)
        if pairs < 1:
            raise ValueError("seeds must hold at least one episode seed")
    n = 2 * pairs
    states = np.zeros((n, STATE_LEN), dtype=np.int64)
    new_matches(states, np.repeat(seeds, 2), DICE_KEYED)
    # Game 2i: A in seat 0; game 2i+1: A in seat 1.
    a_seat = np.tile(np.array([0, 1], dtype=np.int64), pairs)
    actions: list[list[int]] = [[] for _ in range(n)] if record_actions else []
    active = np.ones(n, dtype=np.bool_)
    done = np.zeros(n, dtype=np.bool_)
    for _ in range(MAX_DECISIONS * 2):
        if not active.any():
            break
        for agent, is_a in ((agent_a, True), (agent_b, False)):
            seat_match = (
                (states[:, S_PLAYER] == a_seat) if is_a else (states[:, S_PLAYER] != a_seat)
            )
            rows = np.flatnonzero(active & seat_match).astype(np.int64)
            if rows.size == 0:
                continue
            chosen = np.asarray(agent.act(states, rows), dtype=np.int64)
            if on_decision is not None:
                on_decision(is_a, states[rows], chosen)
            if record_actions:
                for r, a in zip(rows.tolist(), chosen.tolist(), strict=True):
                    actions[r].append(a)
            apply_actions_batch(states, rows, chosen)
            if progress is not None:
                progress(int(rows.size))
        terminal_mask(states, done)
        np.logical_not(done, out=active)
    if active.any():
        raise RuntimeError("a match did not finish within the decision limit")
    seat_scores = states[:, S_SCORE : S_SCORE + 2]  # [n, 2]
    idx = np.arange(n)
    a_scores = seat_scores[idx, a_seat].reshape(pairs, 2)
    b_scores = seat_scores[idx, 1 - a_seat].reshape(pairs, 2)
    return MatchResult(
        summary=paired_summary(a_scores, b_scores),
        seeds=seeds,
        a_scores=a_scores,
        b_scores=b_scores,
        actions=actions,
        final_states=states,
    )
