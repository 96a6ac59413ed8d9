"""PUCT search for 2-player Yatzy: the game's numba kernels for the lockstep driver, and an agent.

Layering: the tree arrays and PUCT math are game-agnostic (:mod:`leaguezero.az.tree`, driver in
:mod:`leaguezero.az.search`); this module supplies the Yatzy part — how a descent walks the
rules, what a chance outcome is, how a terminal node is valued — as plain ``njit`` kernels that
call both the az kernels and :mod:`leaguezero.yatzy.game.rules`. (First-class numba function
arguments would also keep az game-free, but they defeat ``cache=True``.)

Chance: every descent copies the root into a scratch state, switches it to ``DICE_RNG`` with its
own stream (``descent_state``) and never sees the keyed, real future dice. After a keep, or a
mark that rolls for the next player, the outcome key is the new dice index (0..251); the match's
last mark has the single key ``TERMINAL_KEY``. The tree keeps one child per sampled outcome
(closed loop); edge statistics average over the outcomes as they were drawn.

Values: the evaluator's value is from the view of the player to move at the leaf; terminal
leaves get the real result (+1 / 0 / -1), or ``score difference / terminal_scale`` when
``terminal_scale > 0`` (the score-difference objective used by the oracle-value tests).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from leaguezero.az.evaluator import Evaluator
from leaguezero.az.search import Batch, LockstepSearch, SearchParams, SearchResult
from leaguezero.az.tree import (
    C_COLLISIONS,
    C_DESCENTS,
    C_PENDING,
    C_SIMS,
    C_TERMINAL,
    NODE_EXPANDED,
    NODE_PENDING,
    NODE_TERMINAL,
    ROOT_INDEX,
    UNVISITED,
    Tree,
    add_node,
    add_pending,
    backup,
    find_child,
    has_room,
    puct_select,
)
from leaguezero.yatzy.config import MARGIN_SCALE
from leaguezero.yatzy.game.features import NUM_FEATURES, encode_into
from leaguezero.yatzy.game.positions import POSITION_SCHEMA_ID, POSITION_WIDTH
from leaguezero.yatzy.game.rules import (
    DICE_RNG,
    S_DICE,
    S_DICE_MODE,
    S_PLAYER,
    S_REROLLS,
    S_RNG,
    S_SCORE,
    STATE_LEN,
    apply_action,
    is_terminal,
    mix32,
    outcome,
    policy_mask,
    terminal_mask,
)
from leaguezero.yatzy.game.tables import NUM_ACTIONS, NUM_DICE_SETS
from leaguezero.yatzy.search.settings import SearchSettings

TERMINAL_KEY = NUM_DICE_SETS  # chance key of the match-ending mark (one outcome)
_M32 = 0xFFFFFFFF


@njit(cache=True)
def descent_state(root_state, root_seed, descent, out):
    """Copy ``root_state`` (int64 [16]) into ``out`` with its own ``DICE_RNG`` stream.

    The stream depends only on ``(root_seed, descent)``, so a search is reproducible and each
    descent draws fresh dice; the keyed stream of the real match is never consulted.
    """
    for i in range(STATE_LEN):
        out[i] = root_state[i]
    out[S_DICE_MODE] = DICE_RNG
    out[S_RNG] = mix32((root_seed ^ mix32((descent + 1) & _M32)) & _M32)


@njit(cache=True)
def chance_key(state):
    """The outcome key of the state reached by an action: dice index, or TERMINAL_KEY."""
    return TERMINAL_KEY if is_terminal(state) else state[S_DICE]


@njit(cache=True)
def terminal_value(state, player, terminal_scale, margin_weight=0.0, margin_scale=MARGIN_SCALE):
    """Value of a finished match for ``player`` in [-1, 1].

    ``terminal_scale > 0``: score difference / scale (the solitaire objective of the oracle
    tests). Otherwise the utility ``(outcome + w tanh(diff / margin_scale)) / (1 + w)`` with
    ``w = margin_weight``: 0 is AlphaZero's win/draw/loss; ``w > 0`` adds a score term (as
    KataGo does) because single Yatzy moves change the win probability too little for win/loss
    values to separate them early in training.
    """
    diff = state[S_SCORE + player] - state[S_SCORE + 1 - player]
    if terminal_scale > 0.0:
        return diff / terminal_scale
    value = float(outcome(state, player))
    if margin_weight > 0.0:
        value = (value + margin_weight * math.tanh(diff / margin_scale)) / (1.0 + margin_weight)
    return value


@njit(cache=True)
def state_seeds(states, salt, out):
    """``out[g]`` (int64 [G]) = a 32-bit hash of ``states[g]`` (int64 [G, 16]) and ``salt``.

    Eval-mode searches seed their chance streams from the state itself, so the same position
    always gets the same search (deterministic agents, exact 0.5 self-matches).
    """
    for g in range(states.shape[0]):
        h = mix32(salt & _M32)
        for i in range(STATE_LEN):
            h = mix32(h ^ (states[g, i] & _M32) ^ mix32(((states[g, i] >> 32) + i) & _M32))
        out[g] = h


@njit(cache=True)
def begin_roots(tree, counters, batch, root_states, active):
    """Reset every tree, add active roots as pending leaves and batch their features."""
    rows = 0
    for g in range(root_states.shape[0]):
        for c in range(counters.shape[1]):
            counters[g, c] = 0
        tree.num_nodes[g] = 0
        if not active[g]:
            continue
        add_node(tree, g, UNVISITED, UNVISITED, 0, root_states[g, S_PLAYER], NODE_PENDING)
        batch.path_nodes[g, 0, 0] = ROOT_INDEX
        batch.path_depth[g, 0] = 0
        counters[g, C_PENDING] = 1
        encode_into(root_states[g], batch.features[rows])
        policy_mask(root_states[g], batch.legal[rows])
        for i in range(batch.positions.shape[1]):  # the position row: the state's first fields
            batch.positions[rows, i] = root_states[g, i]
        batch.batch_game[rows] = g
        batch.batch_slot[rows] = 0
        rows += 1
    return rows


@njit(cache=True, error_model="numpy")
def select_leaves(
    tree, counters, batch, root_states, root_seeds, active, budgets, max_inflight,
    c_puct, fpu_reduction, virtual_loss, terminal_scale, sim_state,
    margin_weight=0.0, margin_scale=MARGIN_SCALE, normalize_q=False,
):  # fmt: skip
    """One lockstep round: up to ``max_inflight`` new leaves per active tree, batched.

    ``root_states`` int64 [G, 16], ``root_seeds`` int64 [G], ``active`` bool [G], ``budgets``
    int64 [G], ``sim_state`` int64 [16] scratch. Terminal leaves are backed up at once (no
    evaluation); a descent that reaches a leaf already in flight is a collision and ends the
    tree's round. New leaves reserve their path (virtual loss) until evaluated. Returns the
    number of batch rows written.

    Why the descent is written out here rather than in a helper: a numba function that can
    raise (``apply_action`` checks legality) or returns from several places increfs and decrefs
    every array it holds, atomically, on each call. Here that happens once per round; in a
    per-descent helper it cost ~20 atomic pairs per simulation. The az kernels it calls
    (``puct_select``, ``find_child``, ``add_node``, ``backup``) hold no references.
    """
    path_nodes = batch.path_nodes  # [G, K, D + 1] int32
    path_actions = batch.path_actions  # [G, K, D] int32
    rows = 0
    for g in range(root_states.shape[0]):
        if not active[g]:
            continue
        slot = 0
        while slot < max_inflight and counters[g, C_SIMS] + counters[g, C_PENDING] < budgets[g]:
            if not has_room(tree, g, 1):  # a descent adds one node at most
                raise RuntimeError("search tree is full: max_nodes is smaller than the budget")
            descent_state(root_states[g], root_seeds[g], counters[g, C_DESCENTS], sim_state)
            counters[g, C_DESCENTS] += 1
            # Descend from the root to a leaf, adding the leaf if its chance outcome is new.
            node = ROOT_INDEX
            path_nodes[g, slot, 0] = ROOT_INDEX
            depth = 0
            is_new = False
            while not is_new and tree.node_status[g, node] == NODE_EXPANDED:
                action = puct_select(
                    tree, g, node, c_puct, fpu_reduction, virtual_loss, normalize_q
                )
                apply_action(sim_state, action)
                key = chance_key(sim_state)
                child = find_child(tree, g, node, action, key)
                is_new = child == UNVISITED
                if is_new:
                    status = NODE_TERMINAL if key == TERMINAL_KEY else NODE_PENDING
                    child = add_node(tree, g, node, action, key, sim_state[S_PLAYER], status)
                path_actions[g, slot, depth] = action
                depth += 1
                path_nodes[g, slot, depth] = child
                node = child
            if tree.node_status[g, node] == NODE_TERMINAL:
                value = terminal_value(
                    sim_state, tree.node_player[g, node], terminal_scale, margin_weight,
                    margin_scale,
                )  # fmt: skip
                backup(tree, g, path_nodes, path_actions, slot, depth, value)
                counters[g, C_SIMS] += 1
                counters[g, C_TERMINAL] += 1
                continue
            if not is_new:
                counters[g, C_COLLISIONS] += 1
                break
            add_pending(tree, g, path_nodes, path_actions, slot, depth, 1)
            counters[g, C_PENDING] += 1
            batch.path_depth[g, slot] = depth
            encode_into(sim_state, batch.features[rows])
            policy_mask(sim_state, batch.legal[rows])
            for i in range(batch.positions.shape[1]):
                batch.positions[rows, i] = sim_state[i]
            batch.batch_game[rows] = g
            batch.batch_slot[rows] = slot
            rows += 1
            slot += 1
    return rows


@njit(cache=True)
def decision_budgets(root_states, budget_reroll, budget_mark, out):
    """``out[g]`` (int64 [G]): ``budget_reroll`` while rerolls remain, else ``budget_mark``."""
    for g in range(root_states.shape[0]):
        out[g] = budget_reroll if root_states[g, S_REROLLS] > 0 else budget_mark


class YatzyKernels:
    """The Yatzy side of :class:`leaguezero.az.search.GameKernels`."""

    num_features = NUM_FEATURES
    num_actions = NUM_ACTIONS
    # Leaves as yatzy_position_v1 rows (the state's first nine fields), which a served PUCT
    # net's codec encodes and masks exactly as encode_into and policy_mask do here.
    position_width = POSITION_WIDTH
    position_schema_id = POSITION_SCHEMA_ID

    def __init__(
        self,
        budget_reroll: int,
        budget_mark: int,
        terminal_scale: float = 0.0,
        margin_weight: float = 0.0,
        margin_scale: float = MARGIN_SCALE,
    ):
        self.budget_reroll = budget_reroll
        self.budget_mark = budget_mark
        self.terminal_scale = terminal_scale
        self.margin_weight = margin_weight
        self.margin_scale = margin_scale
        self._sim_state = np.zeros(STATE_LEN, np.int64)

    def budgets(self, root_states: np.ndarray) -> np.ndarray:
        out = np.zeros(root_states.shape[0], np.int64)
        decision_budgets(root_states, self.budget_reroll, self.budget_mark, out)
        return out

    def begin(self, tree: Tree, counters, batch: Batch, root_states, active) -> int:
        terminal = np.zeros(root_states.shape[0], np.bool_)
        terminal_mask(root_states, terminal)  # one kernel call, not one per root
        if (terminal & active).any():
            raise ValueError("cannot search a finished match")
        return begin_roots(tree, counters, batch, root_states, active)

    def select(self, tree, counters, batch, root_states, root_seeds, active, budgets, params):
        return select_leaves(
            tree, counters, batch, root_states, root_seeds, active, budgets,
            params.max_inflight_per_game, params.c_puct, params.fpu_reduction, params.virtual_loss,
            self.terminal_scale, self._sim_state, self.margin_weight, self.margin_scale,
            params.normalize_q,
        )  # fmt: skip


def make_search(
    evaluator: Evaluator,
    settings: SearchSettings | None = None,
    *,
    max_games: int = 1,
    seed: int = 0,
    fpu_reduction: float = 0.0,
    terminal_scale: float = 0.0,
) -> LockstepSearch:
    """A :class:`LockstepSearch` over Yatzy with the PUCT knobs of ``settings`` (the config's
    defaults if None): budgets, ``c_puct``, root noise, in-flight leaves, ``normalize_q``.

    Terminal leaves use the utility of ``settings.margin_utility`` and ``margin_scale`` (see
    :func:`terminal_value`); the evaluator must mix its value and margin heads with the same
    weight.
    """
    settings = settings or SearchSettings()
    if evaluator.num_actions != NUM_ACTIONS:
        raise ValueError(f"evaluator has {evaluator.num_actions} actions, Yatzy has {NUM_ACTIONS}")
    params = SearchParams(
        c_puct=settings.c_puct,
        fpu_reduction=fpu_reduction,
        max_inflight_per_game=settings.max_inflight_per_game,
        virtual_loss=settings.virtual_loss,
        dirichlet_alpha=settings.dirichlet_alpha,
        dirichlet_epsilon=settings.dirichlet_epsilon,
        normalize_q=settings.normalize_q,
    )
    kernels = YatzyKernels(
        settings.budget_reroll, settings.budget_mark, terminal_scale, settings.margin_utility,
        settings.margin_scale,
    )  # fmt: skip
    max_budget = max(settings.budget_reroll, settings.budget_mark)
    return LockstepSearch(
        kernels, evaluator, params, max_games=max_games, max_budget=max_budget, seed=seed
    )


class SearchAgent:
    """A match agent that plays the most visited move of a PUCT search (eval mode).

    Deterministic: no root noise, temperature 0, lowest index on ties, and chance streams seeded
    from the position itself (``state_seeds``), so equal states always get equal moves.
    """

    deterministic = True

    def __init__(
        self, evaluator: Evaluator, settings: SearchSettings | None = None, name: str = "search",
        salt: int = 0,
    ) -> None:  # fmt: skip
        self.name = name
        self.salt = salt
        self.search = make_search(evaluator, settings, max_games=1)
        self.last_result: SearchResult | None = None

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Actions (int64 [len(rows)]) for ``states[rows]``; states int64 [G, 16]."""
        roots = np.ascontiguousarray(states[rows])
        seeds = np.zeros(len(rows), np.int64)
        state_seeds(roots, self.salt, seeds)
        self.last_result = self.search.run(roots, seeds, add_noise=False, temperature=0.0)
        return self.last_result.actions


class YatzyReferenceGame:
    """Yatzy for :class:`leaguezero.az.reference_puct.ReferencePUCT` (same chance streams)."""

    num_actions = NUM_ACTIONS

    def __init__(
        self,
        terminal_scale: float = 0.0,
        margin_weight: float = 0.0,
        margin_scale: float = MARGIN_SCALE,
    ) -> None:
        self.terminal_scale = terminal_scale
        self.margin_weight = margin_weight
        self.margin_scale = margin_scale

    def descent_state(self, root_state: np.ndarray, root_seed: int, descent: int) -> np.ndarray:
        out = np.zeros(STATE_LEN, np.int64)
        descent_state(root_state, root_seed, descent, out)
        return out

    def apply(self, state: np.ndarray, action: int) -> None:
        apply_action(state, action)

    def chance_key(self, state: np.ndarray) -> int:
        return int(chance_key(state))

    def is_terminal(self, state: np.ndarray) -> bool:
        return bool(is_terminal(state))

    def player(self, state: np.ndarray) -> int:
        return int(state[S_PLAYER])

    def terminal_value(self, state: np.ndarray, player: int) -> float:
        return float(
            terminal_value(
                state, player, self.terminal_scale, self.margin_weight, self.margin_scale
            )
        )

    def encode(self, state: np.ndarray) -> np.ndarray:
        out = np.zeros(NUM_FEATURES, np.float32)
        encode_into(state, out)
        return out

    def legal(self, state: np.ndarray) -> np.ndarray:
        """The policy's support: legal actions with one KeepMask per kept multiset."""
        out = np.zeros(NUM_ACTIONS, np.bool_)
        policy_mask(state, out)
        return out
