"""The PUCT search's self-play hero: one batched PUCT search per decision round.

The slot loop (:mod:`leaguezero.yatzy.train.selfplay.slots`) asks :class:`PuctHero` for a move
of every
active game each round; one :class:`~leaguezero.az.search.LockstepSearch` call searches all of them
with one evaluator batch per simulation round, and every decision is recorded as a replay sample.

Self-play uses the fast RNG dice (``DICE_RNG``), root Dirichlet noise and temperature on the
executed move for the first ``temperature_decisions`` decisions of each player; targets are always
the normalised visit counts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from leaguezero.az.evaluator import Evaluator
from leaguezero.az.replay import Batch, ShardSchema
from leaguezero.az.tree import C_FALLBACKS
from leaguezero.common.events import EventWriter
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES, encode_batch
from leaguezero.yatzy.game.rules import (
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    policy_mask_batch,
)
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, DICE, NUM_ACTIONS, RULESET_ID
from leaguezero.yatzy.search.puct import make_search
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.slots import (
    PROTOCOL_VERSION,
    HeroFactory,
    OracleValues,
    SelfPlayStats,
    play_selfplay,
)

MAX_DECISIONS = 90  # 30 turns x at most 3 decisions

SHARD_SCHEMA = ShardSchema(
    protocol_version=PROTOCOL_VERSION,
    feature_schema_id=FEATURE_SCHEMA_ID,
    action_space_id=ACTION_SPACE_ID,
    ruleset_id=RULESET_ID,
    num_features=NUM_FEATURES,
    num_actions=NUM_ACTIONS,
)


class GameRecords:
    """Per-slot decision records of the games in flight (preallocated, reused across games).

    ``feats`` float32 [G, 90, F], ``legal`` bool [G, 90, A] (the policy's support), ``pis``
    float32 [G, 90, A], ``movers`` int64 [G, 90], ``qs`` float32 [G, 90] root values,
    ``count`` int64 [G] recorded decisions.
    """

    def __init__(self, num_slots: int) -> None:
        self.count = np.zeros(num_slots, np.int64)
        self.feats = np.zeros((num_slots, MAX_DECISIONS, NUM_FEATURES), np.float32)
        self.legal = np.zeros((num_slots, MAX_DECISIONS, NUM_ACTIONS), np.bool_)
        self.pis = np.zeros((num_slots, MAX_DECISIONS, NUM_ACTIONS), np.float32)
        self.movers = np.zeros((num_slots, MAX_DECISIONS), np.int64)
        self.qs = np.zeros((num_slots, MAX_DECISIONS), np.float32)

    def record(self, slots: np.ndarray, feats, legal, pis, movers, qs) -> None:
        """Append one decision to each of ``slots`` (int64 [n]); arrays have n rows."""
        d = self.count[slots]
        self.feats[slots, d] = feats
        self.legal[slots, d] = legal
        self.pis[slots, d] = pis
        self.movers[slots, d] = movers
        self.qs[slots, d] = qs
        self.count[slots] += 1

    def game_batch(self, slot: int, final: np.ndarray, margin_scale: float) -> Batch:
        """Replay samples of a finished game: targets from each recorded mover's view.

        ``final`` int64 [2]: the seats' final scores.
        """
        k = int(self.count[slot])
        who = self.movers[slot, :k]
        diff = (final[who] - final[1 - who]).astype(np.float32)
        return Batch(
            self.feats[slot, :k].copy(),
            self.legal[slot, :k].astype(np.uint8),
            self.pis[slot, :k].copy(),
            np.sign(diff).astype(np.float32),
            np.tanh(diff / margin_scale).astype(np.float32),
            self.qs[slot, :k].copy(),
        )


class HeroSearch:
    """The batched self-play search step shared by self-play and league play.

    Encodes the roots, masks them to the policy's support, searches them in one lockstep call
    with root noise and per-game temperature, and keeps the running totals.
    """

    def __init__(
        self,
        cfg: YatzyConfig,
        settings: SearchSettings,
        evaluator: Evaluator,
        num_slots: int,
        seed: int,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.search = make_search(evaluator, settings, max_games=num_slots, seed=seed)
        self.per_player = np.zeros((num_slots, 2), np.int64)  # searched decisions per seat
        self.row_feats = np.zeros((num_slots, NUM_FEATURES), np.float32)
        self.row_legal = np.zeros((num_slots, NUM_ACTIONS), np.bool_)
        self.totals = dict(decisions=0, sims=0, evals=0, fallbacks=0, collisions=0)
        self.eval_seconds = 0.0

    def reset(self, slot: int) -> None:
        self.per_player[slot] = 0

    def stats_fields(
        self, games: int, samples: int, seconds: float, scores: list[int], seat0_points: float
    ) -> dict[str, float | int]:
        """The :class:`SelfPlayStats` fields of a finished self-play call."""
        t = self.totals
        return {
            "games": games,
            "decisions": t["decisions"],
            "samples": samples,
            "sims": t["sims"],
            "evals": t["evals"],
            "fallbacks": t["fallbacks"],
            "collisions": t["collisions"],
            "seconds": seconds,
            "evaluate_seconds": self.eval_seconds,
            "sims_per_s": t["sims"] / max(seconds, 1e-9),
            "decisions_per_s": t["decisions"] / max(seconds, 1e-9),
            "mean_score": float(np.mean(scores)) if scores else math.nan,
            "seat0_win_rate": seat0_points / games if games else math.nan,
        }

    def run(self, states: np.ndarray, rows: np.ndarray, rng: np.random.Generator):
        """Search ``states[rows]``; returns (result, roots, movers). Moves are not applied.

        ``self.row_feats[:n]`` / ``self.row_legal[:n]`` hold the roots' features and masks.
        """
        n = len(rows)
        settings = self.settings
        movers = states[rows, S_PLAYER]
        temps = np.where(
            self.per_player[rows, movers] < settings.temperature_decisions,
            settings.temperature,
            0.0,
        )
        encode_batch(states, rows, self.row_feats[:n])
        policy_mask_batch(states, rows, self.row_legal[:n])  # one mask per distinct keep
        roots = np.ascontiguousarray(states[rows])
        seeds = rng.integers(0, 2**62, size=n, dtype=np.int64)
        result = self.search.run(
            roots, seeds, add_noise=settings.dirichlet_epsilon > 0, temperature=temps
        )
        self.eval_seconds += result.stats["evaluate_seconds"]
        for key in ("sims", "evals", "fallbacks", "collisions"):
            self.totals[key] += int(result.stats[key])
        self.totals["decisions"] += n
        self.per_player[rows, movers] += 1
        return result, roots, movers


class PuctHero:
    """The PUCT :class:`~leaguezero.yatzy.train.selfplay.slots.SelfPlayHero`: search, record, build
    samples (the turn search's is :class:`leaguezero.yatzy.train.selfplay.turn.TurnHero`)."""

    schema = SHARD_SCHEMA

    def __init__(
        self,
        cfg: YatzyConfig,
        settings: SearchSettings,
        evaluator: Evaluator,
        num_slots: int,
        seed: int,
        roots_log: EventWriter | None = None,
        oracle_values: OracleValues | None = None,
    ) -> None:
        self.cfg = cfg
        self.search = HeroSearch(cfg, settings, evaluator, num_slots, seed)
        self.records = GameRecords(num_slots)
        self.roots_log = roots_log
        self.oracle_values = oracle_values

    def start(self, slot: int) -> None:
        """A new game begins in ``slot``."""
        self.records.count[slot] = 0
        self.search.reset(slot)

    def act(
        self, states: np.ndarray, rows: np.ndarray, record: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Search ``states[rows]``; record the decisions where ``record`` (bool [n]); return the
        moves to play (int64 [n], not applied)."""
        n = len(rows)
        search = self.search
        result, roots, movers = search.run(states, rows, rng)
        rec = np.flatnonzero(record)
        self.records.record(
            rows[rec], search.row_feats[rec], search.row_legal[rec], result.pi[rec],
            movers[rec], result.root_value[rec],
        )  # fmt: skip
        rate = self.cfg.selfplay.root_log_rate
        if self.roots_log is not None and rate > 0:
            picked = np.flatnonzero(rng.random(n) < rate)
            if picked.size:
                _log_roots(self.roots_log, roots[picked], result, picked, self.oracle_values, rows)
        return result.actions

    def game_batch(self, slot: int, final: np.ndarray) -> Batch:
        """The replay samples of the finished game in ``slot`` (final scores ``final`` [2])."""
        return self.records.game_batch(slot, final, self.search.settings.margin_scale)

    def stats_fields(
        self, games: int, samples: int, seconds: float, scores: list[int], seat0_points: float
    ) -> dict[str, float | int]:
        return self.search.stats_fields(games, samples, seconds, scores, seat0_points)


def run_selfplay(
    cfg: YatzyConfig,
    evaluator: Evaluator,
    out_dir: str | Path,
    *,
    hero_factory: HeroFactory = PuctHero,
    **kwargs,
) -> SelfPlayStats:
    """:func:`leaguezero.yatzy.train.selfplay.slots.play_selfplay` with the PUCT hero unless told
    otherwise (same arguments, same resume contract)."""
    return play_selfplay(cfg, evaluator, out_dir, hero_factory=hero_factory, **kwargs)


def _log_roots(
    log: EventWriter,
    roots: np.ndarray,
    result,
    picked: np.ndarray,
    oracle_values: OracleValues | None,
    rows: np.ndarray,
) -> None:
    """One ``mcts_root`` event per sampled root
    (docs/reference/design.md#replay-checkpoints-and-logs)."""
    values = oracle_values(roots) if oracle_values is not None else None
    for j, i in enumerate(picked.tolist()):
        pi = result.pi[i]
        legal_idx = np.flatnonzero(result.raw_priors[i] > 0) if pi.sum() else np.array([], int)
        p = pi[pi > 0].astype(np.float64)
        record = {
            "slot": int(rows[i]),
            "player": int(roots[j, S_PLAYER]),
            "rerolls_left": int(roots[j, S_REROLLS]),
            "dice": [int(v) for v in DICE[roots[j, S_DICE]]],
            "raw_priors": {int(a): round(float(result.raw_priors[i, a]), 4) for a in legal_idx},
            "noisy_priors": {int(a): round(float(result.noisy_priors[i, a]), 4) for a in legal_idx},
            "visits": {
                int(a): round(float(pi[a]) * float(result.counters[i, 0]), 1)
                for a in np.flatnonzero(pi)
            },
            "pi_entropy": float(-(p * np.log(p)).sum()),
            "pi_max": float(pi.max()),
            "fallback": bool(result.counters[i, C_FALLBACKS] > 0),
            "root_value": float(result.root_value[i]),
            "action": int(result.actions[i]),
        }
        if values is not None:
            v = values[j]
            best = int(np.nanargmax(v))
            record["oracle_action"] = best
            record["oracle_regret"] = float(np.nanmax(v) - v[int(result.actions[i])])
        log.emit("mcts_root", **record)
