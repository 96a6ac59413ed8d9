"""The turn search: exact play inside a turn, a network's values between turns.

At a turn the player to move can leave at most :data:`~leaguezero.yatzy.search.turn_dp.NUM_SLOTS`
distinct positions behind (open category x points scored). :class:`TurnSearch` encodes those
successors for every game of a batch — each is the opponent's turn start, seen by the opponent
(feature schema 2) — asks the evaluator for all of them in **one** call, negates the values
(utilities are antisymmetric: the opponent's +u is the mover's -u) and runs the exact in-turn DP
(:mod:`leaguezero.yatzy.search.turn_dp`).
A mark that ends the match is valued exactly. The successor
values of a game are cached by its board, so the three decisions of a turn cost one evaluation.

The evaluator is any :class:`~leaguezero.az.evaluator.Evaluator` over schema-2 features (the
in-process torch model or the inference server's client); its ``margin_weight`` mixes the
value and margin heads exactly as in PUCT, and the last mark of a match is valued with the
same utility (:func:`~leaguezero.yatzy.search.turn_dp.final_utility`). Priors are not used.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from leaguezero.az.evaluator import (
    AsyncEvaluator,
    Evaluator,
    PositionValueEvaluator,
    ValueEvaluator,
    margin_weight,
)
from leaguezero.yatzy.config import MARGIN_SCALE
from leaguezero.yatzy.game.positions import POSITION_SCHEMA_ID, POSITION_WIDTH
from leaguezero.yatzy.game.rules import S_AVAIL, S_PLAYER, S_SCORE, S_UPPER, STATE_LEN, policy_mask
from leaguezero.yatzy.game.tables import NUM_ACTIONS, NUM_KEPT
from leaguezero.yatzy.game.turn_features import NUM_TURN_FEATURES, TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.search.turn_dp import (
    NUM_SLOTS,
    TABLE_ROWS,
    fill_successor_values,
    successor_batch,
    successor_positions,
    successor_states,
    turn_decisions,
)

MAX_GAMES_PER_CALL = 512  # games whose successors go into one evaluator call (memory bound)
PIPELINE_CHUNK = 1024  # rows per request when the evaluator is the inference server's client
_KEY_FIELDS = np.array(
    [S_AVAIL, S_AVAIL + 1, S_UPPER, S_UPPER + 1, S_SCORE, S_SCORE + 1, S_PLAYER], np.int64
)


@njit(cache=True)
def stale_rows(states, rows, keys, fields, out):
    """Rows whose board differs from the cached key (keys int64 [G, 7]); updates the keys.

    Writes the positions ``j`` (into ``rows``) of the stale rows to ``out``; returns the count.
    """
    count = 0
    for j in range(rows.shape[0]):
        g = rows[j]
        same = True
        for i in range(fields.shape[0]):
            if keys[g, i] != states[g, fields[i]]:
                same = False
                keys[g, i] = states[g, fields[i]]
        if not same:
            out[count] = j
            count += 1
    return count


@njit(cache=True)
def sample_actions(states, rows, action_values, temperature, uniforms, actions):
    """Replace ``actions[j]`` by a softmax sample over the policy's support (one mask per kept
    multiset) at ``temperature`` (utility units); 0 keeps the greedy action."""
    if temperature <= 0.0:
        return
    support = np.zeros(NUM_ACTIONS, np.bool_)
    weights = np.zeros(NUM_ACTIONS)
    for j in range(rows.shape[0]):
        policy_mask(states[rows[j]], support)
        best = -np.inf
        for a in range(NUM_ACTIONS):
            if support[a] and action_values[j, a] > best:
                best = action_values[j, a]
        total = 0.0
        for a in range(NUM_ACTIONS):
            weights[a] = np.exp((action_values[j, a] - best) / temperature) if support[a] else 0.0
            total += weights[a]
        target = uniforms[j] * total
        acc = 0.0
        for a in range(NUM_ACTIONS):
            if weights[a] > 0.0:
                acc += weights[a]
                actions[j] = a
                if acc >= target:
                    break


class TurnSearch:
    """Turn-search decisions for batches of 2-player states (see the module docstring).

    Args:
        evaluator: schema-2 evaluator; its ``margin_weight`` (a
            :class:`~leaguezero.az.evaluator.MarginEvaluator`'s; else 0) is the utility's
            margin weight for exact match ends too.
        margin_scale: the utility's margin scale (``train.margin_scale``).
    """

    def __init__(
        self, evaluator: Evaluator, margin_scale: float = MARGIN_SCALE, depth: int = 1
    ) -> None:
        if evaluator.feature_schema_id != TURN_FEATURE_SCHEMA_ID:
            raise ValueError(
                f"the turn search needs a turn-start network (feature schema "
                f"{TURN_FEATURE_SCHEMA_ID}); this evaluator serves schema "
                f"{evaluator.feature_schema_id} (a PUCT network: use search=puct)"
            )
        if depth not in (1, 2):
            raise ValueError(f"turn search depth must be 1 or 2, got {depth}")
        self.evaluator = evaluator
        # depth 2: a successor's value is the exact expectimax of the opponent's turn over the
        # network's values of *their* successors (GNU Backgammon's 2-ply), not the network's.
        self.inner = TurnSearch(evaluator, margin_scale) if depth == 2 else None
        self.margin_weight = margin_weight(evaluator)
        self.margin_scale = float(margin_scale)
        self._keys = np.full((0, len(_KEY_FIELDS)), -1, np.int64)
        self._succ = np.zeros((0, NUM_SLOTS))
        self._feats = np.zeros((0, NUM_TURN_FEATURES), np.float32)
        self._legal = np.ones((0, NUM_ACTIONS), np.bool_)
        # An evaluator that encodes positions itself (the inference server) gets 9 int32 a
        # successor instead of 169 float32 features.
        self._by_position = isinstance(evaluator, PositionValueEvaluator)
        self._positions = np.zeros((0, POSITION_WIDTH), np.int32)
        self._tables = np.zeros((TABLE_ROWS, NUM_KEPT + 1))
        self.evaluations = 0  # successor positions evaluated
        self.calls = 0  # evaluator calls
        self.evaluate_seconds = 0.0

    def _ensure(self, games: int, rows: int) -> None:
        if self._keys.shape[0] != games:  # another batch shape: a fresh cache
            self._keys = np.full((games, len(_KEY_FIELDS)), -1, np.int64)
            self._succ = np.zeros((games, NUM_SLOTS))
        need = min(rows, MAX_GAMES_PER_CALL) * NUM_SLOTS
        if self._by_position:
            if self._positions.shape[0] < need:
                self._positions = np.zeros((need, POSITION_WIDTH), np.int32)
            return
        if self._feats.shape[0] < need:
            self._feats = np.zeros((need, NUM_TURN_FEATURES), np.float32)
            self._legal = np.ones((need, NUM_ACTIONS), np.bool_)

    def successor_values(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Successor values (float64 [n, NUM_SLOTS], mover's view) of ``states[rows]``.

        Only games whose board changed since the last call are evaluated: in one evaluator
        call per :data:`MAX_GAMES_PER_CALL` such games.
        """
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure(states.shape[0], len(rows))
        stale = np.zeros(len(rows), np.int64)
        m = stale_rows(states, rows, self._keys, _KEY_FIELDS, stale)
        for lo in range(0, m, MAX_GAMES_PER_CALL):  # bounded memory for huge batches
            fresh_rows = rows[stale[lo : min(m, lo + MAX_GAMES_PER_CALL)]]
            row_of = np.zeros((len(fresh_rows), NUM_SLOTS), np.int64)
            succ = np.zeros((len(fresh_rows), NUM_SLOTS))
            # Same rows, same order, same row_of: positions for a server that encodes them.
            enumerate_successors, buffer = successor_batch, self._feats
            if self._by_position:
                enumerate_successors, buffer = successor_positions, self._positions
            k = enumerate_successors(
                states, fresh_rows, buffer, row_of, succ, self.margin_weight, self.margin_scale
            )
            if k and self.inner is not None:
                after = np.zeros((k, STATE_LEN), np.int64)  # the successors, opponent to roll
                successor_states(states, fresh_rows, row_of, after)
                inner_rows = np.arange(k, dtype=np.int64)
                opp_values = np.zeros(k)
                for i in range(0, k, MAX_GAMES_PER_CALL):
                    part = inner_rows[i : i + MAX_GAMES_PER_CALL]
                    _, _, opp_values[part] = self.inner.decide(after, part)
                fill_successor_values(row_of, opp_values, succ)
            elif k:
                t0 = time.perf_counter()
                values = self._evaluate(k)
                self.evaluate_seconds += time.perf_counter() - t0
                self.evaluations += k
                self.calls += 1
                fill_successor_values(row_of, values, succ)
            self._succ[fresh_rows] = succ
        return self._succ[rows]

    def _evaluate(self, k: int) -> np.ndarray:
        """Values (float32 [k]) of the first ``k`` feature rows.

        A :class:`~leaguezero.az.evaluator.ValueEvaluator` is asked for values only. An
        :class:`~leaguezero.az.evaluator.AsyncEvaluator` (the inference server's client) gets
        the rows in chunks that are all in flight at once, so the server's forward of one
        chunk overlaps the transfer of the next.
        """
        if self._by_position:  # the server encodes positions and dedups their boards itself
            values = self.evaluator.evaluate_position_values(
                self._positions[:k], POSITION_SCHEMA_ID
            )
            return np.asarray(values, np.float32)
        if isinstance(self.evaluator, ValueEvaluator):
            # No priors needed: the in-process net skips its policy head and repeated towers.
            return np.asarray(self.evaluator.evaluate_values(self._feats[:k]), np.float32)
        if not isinstance(self.evaluator, AsyncEvaluator) or k <= PIPELINE_CHUNK:
            _, values = self.evaluator.evaluate(self._feats[:k], self._legal[:k])
            return np.asarray(values, np.float32)
        chunks = range(0, k, PIPELINE_CHUNK)
        pending = [
            self.evaluator.evaluate_async(
                self._feats[i : i + PIPELINE_CHUNK], self._legal[i : i + PIPELINE_CHUNK]
            )
            for i in chunks
        ]
        return np.concatenate([p.result()[1] for p in pending]).astype(np.float32)

    def decide(
        self, states: np.ndarray, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(best actions int64 [n], action values float64 [n, 47], pre-roll turn values [n])."""
        rows = np.asarray(rows, dtype=np.int64)
        succ = self.successor_values(states, rows)
        n = len(rows)
        actions = np.zeros(n, np.int64)
        action_values = np.zeros((n, NUM_ACTIONS))
        turn_values = np.zeros(n)
        turn_decisions(states, rows, succ, self._tables, action_values, turn_values, actions)
        return actions, action_values, turn_values


class TurnSearchAgent:
    """A match agent that plays the turn search's best action (deterministic)."""

    deterministic = True

    def __init__(
        self,
        evaluator: Evaluator,
        name: str = "turn",
        margin_scale: float = MARGIN_SCALE,
        depth: int = 1,
    ) -> None:
        self.name = name
        self.search = TurnSearch(evaluator, margin_scale=margin_scale, depth=depth)

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Actions (int64 [len(rows)]) for ``states[rows]``; states int64 [G, 16]."""
        actions, _, _ = self.search.decide(states, rows)
        return actions

    def action_values(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Every action's value (float64 [n, 47], NaN if illegal): the mover's utility."""
        _, values, _ = self.search.decide(states, rows)
        return values
