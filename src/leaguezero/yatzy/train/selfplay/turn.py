"""Self-play with the turn search: one replay sample per turn start, valued by a Bellman backup.

Many games run in lockstep in the shared slot loop
(:mod:`leaguezero.yatzy.train.selfplay.slots`): every round
each active game makes one decision, and the games at a new turn get their successors evaluated
in one batched call. The sample of a turn is its start position (feature schema 2, the mover's
view, no dice) with two targets: the game's outcome (``z``, ``z_margin``) and ``q``, the exact
expected utility of the turn given the network's values of the next turn starts (the DP's
pre-roll value: a one-turn Bellman backup, far less noisy than the outcome). The trainer blends
them with ``train.q_weight`` (``1 - q_weight`` is the outcome's weight).

:class:`TurnHero` is the turn search's side of the shared self-play slot loop
(:func:`leaguezero.yatzy.train.selfplay.slots.play_selfplay`, and league play).

Exploration: the executed move is a softmax sample over the action values at
``search.temperature`` (utility units) for the first ``search.temperature_turns`` turns of each
player, then greedy. The targets are always the greedy backup, so exploration does not bias them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from leaguezero.az.evaluator import Evaluator
from leaguezero.az.replay import Batch, ShardSchema
from leaguezero.common.events import EventWriter
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import (
    S_MARKS,
    S_PLAYER,
    S_REROLLS,
)
from leaguezero.yatzy.game.tables import ACTION_SPACE_ID, NUM_ACTIONS, NUM_CATEGORIES, RULESET_ID
from leaguezero.yatzy.game.turn_features import (
    NUM_TURN_FEATURES,
    TURN_FEATURE_SCHEMA_ID,
    encode_turn_state_into,
)
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearch, sample_actions
from leaguezero.yatzy.train.selfplay.slots import PROTOCOL_VERSION, SelfPlayStats, play_selfplay

TURNS = 2 * NUM_CATEGORIES  # turn starts per game (both players)

TURN_SHARD_SCHEMA = ShardSchema(
    protocol_version=PROTOCOL_VERSION,
    feature_schema_id=TURN_FEATURE_SCHEMA_ID,
    action_space_id=ACTION_SPACE_ID,
    ruleset_id=RULESET_ID,
    num_features=NUM_TURN_FEATURES,
    num_actions=NUM_ACTIONS,
)


class TurnRecords:
    """Per-slot turn-start records of the games in flight (preallocated, reused).

    ``feats`` float32 [G, 30, F], ``movers`` int64 [G, 30], ``qs`` float32 [G, 30],
    ``count`` int64 [G].
    """

    def __init__(self, num_slots: int) -> None:
        self.count = np.zeros(num_slots, np.int64)
        self.feats = np.zeros((num_slots, TURNS, NUM_TURN_FEATURES), np.float32)
        self.movers = np.zeros((num_slots, TURNS), np.int64)
        self.qs = np.zeros((num_slots, TURNS), np.float32)

    def record(self, slot: int, state: np.ndarray, q: float) -> None:
        k = self.count[slot]
        encode_turn_state_into(state, self.feats[slot, k])
        self.movers[slot, k] = state[S_PLAYER]
        self.qs[slot, k] = q
        self.count[slot] += 1

    def game_batch(
        self, slot: int, final: np.ndarray, margin_scale: float, margin_weight: float,
        td_lambda: float,
    ) -> Batch:  # fmt: skip
        """Replay samples of a finished game (no policy targets: ``legal`` and ``pi`` are 0).

        ``q`` holds the TD(lambda) returns of the turn starts (see :func:`td_lambda_returns`).
        """
        k = int(self.count[slot])
        who = self.movers[slot, :k]
        diff = (final[who] - final[1 - who]).astype(np.float64)
        z = np.sign(diff)
        z_margin = np.tanh(diff / margin_scale)
        final_utility = (z + margin_weight * z_margin) / (1.0 + margin_weight)
        q = td_lambda_returns(self.qs[slot, :k].astype(np.float64), final_utility[-1], td_lambda)
        return Batch(
            self.feats[slot, :k].copy(),
            np.zeros((k, NUM_ACTIONS), np.uint8),
            np.zeros((k, NUM_ACTIONS), np.float32),
            z.astype(np.float32),
            z_margin.astype(np.float32),
            q.astype(np.float32),
        )


def td_lambda_returns(backups: np.ndarray, last_final: float, td_lambda: float) -> np.ndarray:
    """TD(lambda) returns of a game's turn starts, each from its mover's view (float64 [T]).

    Turns alternate movers, so the next turn's return enters negated (utilities are
    antisymmetric): ``G_t = (1 - lambda) * backup_t + lambda * (-G_{t+1})``, and after the last
    turn ``G_{T-1} = (1 - lambda) * backup_{T-1} + lambda * last_final`` (``last_final``: the
    final utility from the last mover's view). ``lambda = 0`` gives the one-turn backups,
    ``lambda = 1`` the outcome.
    """
    out = np.empty_like(backups)
    ahead = last_final
    for t in range(len(backups) - 1, -1, -1):
        out[t] = (1.0 - td_lambda) * backups[t] + td_lambda * ahead
        ahead = -out[t]
    return out


class TurnHero:
    """The hero's side of the self-play slot loop with the turn search (the interface of
    :class:`leaguezero.yatzy.train.selfplay.puct.PuctHero`): decide, explore, record turn starts."""

    schema = TURN_SHARD_SCHEMA

    def __init__(
        self,
        cfg: YatzyConfig,
        settings: SearchSettings,
        evaluator: Evaluator,
        num_slots: int,
        seed: int,
        roots_log: EventWriter | None = None,
        oracle_values=None,
    ) -> None:
        del seed, roots_log, oracle_values  # deterministic search; no tree roots to log
        self.cfg = cfg
        self.settings = settings
        self.search = TurnSearch(evaluator, margin_scale=self.settings.margin_scale)
        # Deeper targets on a sample of turn starts (play stays one turn deep): the value
        # network's errors are noise that one more exact turn averages out.
        self.deep_share = cfg.search.target_depth2_share
        self.deep = (
            TurnSearch(evaluator, margin_scale=self.settings.margin_scale, depth=2)
            if self.deep_share > 0
            else None
        )
        self.deep_targets = 0
        self.records = TurnRecords(num_slots)
        self.explore_marks = 2 * self.settings.temperature_turns  # marks before greedy play
        self.decisions = 0

    def start(self, slot: int) -> None:
        self.records.count[slot] = 0

    def act(
        self, states: np.ndarray, rows: np.ndarray, record: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Best moves of ``states[rows]`` (sampled while exploring); records the turn starts
        among the rows where ``record`` (bool [n])."""
        actions, action_values, turn_values = self.search.decide(states, rows)
        starts = np.flatnonzero(record & (states[rows, S_REROLLS] == 2))
        if self.deep is not None and starts.size:
            deep = starts[rng.random(starts.size) < self.deep_share]
            if deep.size:
                _, _, turn_values[deep] = self.deep.decide(states, rows[deep])
                self.deep_targets += int(deep.size)
        for j in starts:
            self.records.record(int(rows[j]), states[rows[j]], float(turn_values[j]))
        temperature = self.settings.turn_temperature
        exploring = np.flatnonzero(states[rows, S_MARKS] < self.explore_marks)
        if exploring.size and temperature > 0:
            chosen = actions[exploring]
            uniforms = rng.random(len(exploring))
            sample_actions(
                states, rows[exploring], action_values[exploring], temperature, uniforms, chosen
            )
            actions[exploring] = chosen
        self.decisions += len(rows)
        return actions

    def game_batch(self, slot: int, final: np.ndarray) -> Batch:
        return self.records.game_batch(
            slot, final, self.settings.margin_scale, self.search.margin_weight,
            self.cfg.search.td_lambda,
        )  # fmt: skip

    def stats_fields(
        self, games: int, samples: int, seconds: float, scores: list[int], seat0_points: float
    ) -> dict[str, float | int]:
        """The :class:`~leaguezero.yatzy.train.selfplay.slots.SelfPlayStats` fields ("sims"
        counts the
        successor positions evaluated, "evals" the evaluator calls; both include the
        two-turn targets' searches)."""
        searches = [self.search] + ([self.deep.inner] if self.deep is not None else [])
        evaluations = sum(s.evaluations for s in searches)
        return {
            "games": games,
            "decisions": self.decisions,
            "samples": samples,
            "sims": evaluations,
            "evals": sum(s.calls for s in searches),
            "fallbacks": 0,
            "collisions": 0,
            "seconds": seconds,
            "evaluate_seconds": sum(s.evaluate_seconds for s in searches),
            "sims_per_s": evaluations / max(seconds, 1e-9),
            "decisions_per_s": self.decisions / max(seconds, 1e-9),
            "mean_score": float(np.mean(scores)) if scores else float("nan"),
            "seat0_win_rate": seat0_points / games if games else float("nan"),
        }


def run_turn_selfplay(
    cfg: YatzyConfig,
    evaluator: Evaluator,
    out_dir: str | Path,
    **kwargs,
) -> SelfPlayStats:
    """:func:`~leaguezero.yatzy.train.selfplay.slots.play_selfplay` with the turn search (same
    arguments, same resume contract)."""
    return play_selfplay(cfg, evaluator, out_dir, hero_factory=TurnHero, **kwargs)
