"""Oracle diagnostics for any agent: per-decision regret, oracle match rate, regret per game.

Gating and reports pass arrays of decisions (the states an agent saw and the actions it took);
the oracle values every legal action of each state for the mover's own board (solitaire values:
expected remaining score, future upper bonus included), and

* ``regret = best value - chosen value`` (expected points lost, >= 0),
* a decision *matches* the oracle when its value is within :data:`TIE_EPS` of the best (ties
  count as matches, so equivalent KeepMasks over equal dice all match).

Recorded games (``yz oracle regret GAME.json``) are small JSON files replayed through the rules
engine; see :func:`load_game` and ``docs/reference/oracle.md``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leaguezero.common.atomic import atomic_write_json
from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    DICE_RNG,
    S_PLAYER,
    S_REROLLS,
    STATE_LEN,
    apply_action,
    is_legal,
    new_match,
)
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.oracle.dp import TIE_EPS, oracle_action_values
from leaguezero.yatzy.oracle.solver import Oracle, OracleError

GAME_SCHEMA_VERSION = 1
GAME_KIND = "yatzy_game"
DICE_MODES = {"keyed": DICE_KEYED, "rng": DICE_RNG}


@dataclass(frozen=True)
class DecisionDiagnostics:
    """Per-decision oracle comparison; every array has one entry per decision (N)."""

    regret: np.ndarray  # float64 [N] expected points lost against the best option (>= 0)
    matches: np.ndarray  # bool [N] chosen action is one of the oracle's best (ties allowed)
    best_value: np.ndarray  # float64 [N] expected remaining score of the best option
    chosen_value: np.ndarray  # float64 [N] expected remaining score of the chosen action
    best_action: np.ndarray  # int64 [N] the oracle's action (lowest index among ties)
    rerolls_left: np.ndarray  # int64 [N] roll stage of the decision (2, 1, 0)
    player: np.ndarray  # int64 [N] seat that decided


def diagnose_decisions(
    oracle: Oracle, states: np.ndarray, actions: np.ndarray
) -> DecisionDiagnostics:
    """Compare decisions with the oracle.

    ``states`` int64 [N, STATE_LEN]: the states before each decision (not over);
    ``actions`` int64 [N]: the actions taken. Raises ValueError if an action is illegal.
    """
    states = np.ascontiguousarray(states, dtype=np.int64).reshape(-1, STATE_LEN)
    actions = np.asarray(actions, dtype=np.int64).reshape(-1)
    if len(states) != len(actions):
        raise ValueError(f"{len(states)} states but {len(actions)} actions")
    for i in range(len(states)):
        if not is_legal(states[i], actions[i]):
            raise ValueError(f"decision {i}: action {actions[i]} is illegal in its state")
    values = np.empty((len(states), NUM_ACTIONS))
    oracle_action_values(oracle.values, states, np.arange(len(states), dtype=np.int64), values)
    best_value = np.nanmax(values, axis=1) if len(states) else np.zeros(0)
    chosen_value = values[np.arange(len(states)), actions]
    # Lowest action index within TIE_EPS of the best: the oracle agent's own choice.
    best_action = np.argmax(values >= best_value[:, None] - TIE_EPS, axis=1).astype(np.int64)
    return DecisionDiagnostics(
        regret=np.maximum(best_value - chosen_value, 0.0),
        matches=chosen_value >= best_value - TIE_EPS,
        best_value=best_value,
        chosen_value=chosen_value,
        best_action=best_action,
        rerolls_left=states[:, S_REROLLS].copy(),
        player=states[:, S_PLAYER].copy(),
    )


def summarize(diag: DecisionDiagnostics, games: int) -> dict[str, float | int]:
    """Headline numbers over ``games`` games' decisions of one agent (JSON-ready).

    ``mean_regret_per_game`` is total regret / games: the expected points the agent gave away
    per game of its own board against optimal solitaire play.
    """
    if games < 1:
        raise ValueError("games must be at least 1")
    n = len(diag.regret)
    out: dict[str, float | int] = {
        "games": games,
        "decisions": n,
        "oracle_match_rate": float(diag.matches.mean()) if n else float("nan"),
        "mean_regret_per_decision": float(diag.regret.mean()) if n else float("nan"),
        "mean_regret_per_game": float(diag.regret.sum() / games),
        "max_regret": float(diag.regret.max()) if n else 0.0,
    }
    for stage in (2, 1, 0):
        sel = diag.rerolls_left == stage
        out[f"match_rate_rerolls_{stage}"] = float(diag.matches[sel].mean()) if sel.any() else 0.0
    return out


def replay_game(
    seed: int, actions: list[int] | np.ndarray, dice_mode: int = DICE_KEYED
) -> np.ndarray:
    """The states (int64 [len(actions), STATE_LEN]) before each action of a recorded game.

    Raises ValueError naming the first illegal action (a game that does not replay).
    """
    state = np.zeros(STATE_LEN, dtype=np.int64)
    new_match(state, int(seed), dice_mode)
    states = np.empty((len(actions), STATE_LEN), dtype=np.int64)
    for i, a in enumerate(actions):
        states[i] = state
        if not is_legal(state, int(a)):
            raise ValueError(f"action {i} ({a}) is illegal when the game is replayed")
        apply_action(state, int(a))
    return states


@dataclass(frozen=True)
class RecordedGame:
    """A 2-player game as its seed, dice mode and action list (``GAME.json``)."""

    seed: int
    dice_mode: str  # "keyed" | "rng"
    actions: list[int]
    players: list[str] | None = None  # optional names of seat 0 and seat 1

    def to_json(self) -> dict:
        out = {
            "schema_version": GAME_SCHEMA_VERSION,
            "kind": GAME_KIND,
            "seed": self.seed,
            "dice_mode": self.dice_mode,
            "actions": list(self.actions),
        }
        if self.players is not None:
            out["players"] = list(self.players)
        return out


def save_game(path: str | os.PathLike, game: RecordedGame) -> None:
    """Write a recorded game atomically (schema version included)."""
    atomic_write_json(path, game.to_json(), indent=None)


def load_game(path: str | os.PathLike) -> RecordedGame:
    """Read and check a recorded game; raises OracleError with a one-line reason."""
    try:
        obj = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise OracleError(f"game file {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as err:
        raise OracleError(f"cannot read game file {path}: {err}") from None
    if not isinstance(obj, dict) or obj.get("kind", GAME_KIND) != GAME_KIND:
        raise OracleError(f"{path} is not a recorded Yatzy game (kind {GAME_KIND!r})")
    if obj.get("schema_version") != GAME_SCHEMA_VERSION:
        raise OracleError(
            f"{path} has schema_version {obj.get('schema_version')!r}; "
            f"this version reads {GAME_SCHEMA_VERSION}"
        )
    seed, mode, actions = obj.get("seed"), obj.get("dice_mode", "keyed"), obj.get("actions")
    if not isinstance(seed, int) or not 0 <= seed < 2**62:
        raise OracleError(f"{path}: seed must be an integer in 0..2**62-1")
    if mode not in DICE_MODES:
        raise OracleError(f"{path}: dice_mode must be one of {sorted(DICE_MODES)}, got {mode!r}")
    if not isinstance(actions, list) or not all(
        isinstance(a, int) and 0 <= a < NUM_ACTIONS for a in actions
    ):
        raise OracleError(f"{path}: actions must be a list of action indices 0..46")
    players = obj.get("players")
    return RecordedGame(seed=seed, dice_mode=mode, actions=actions, players=players)


def diagnose_game(oracle: Oracle, game: RecordedGame) -> tuple[np.ndarray, DecisionDiagnostics]:
    """Replay a recorded game; returns (states [N, STATE_LEN], per-decision diagnostics)."""
    try:
        states = replay_game(game.seed, game.actions, DICE_MODES[game.dice_mode])
    except ValueError as err:
        raise OracleError(str(err)) from None
    return states, diagnose_decisions(oracle, states, np.asarray(game.actions, dtype=np.int64))


def diagnose_match(oracle: Oracle, result, dice_mode: int = DICE_KEYED) -> dict[str, dict]:
    """Oracle summaries for agents A and B of a :class:`~leaguezero.yatzy.agents.match.MatchResult`.

    The match must have been played with ``record_actions=True``. Game ``2i`` has A in seat 0,
    game ``2i + 1`` has A in seat 1 (see ``match.py``). Returns ``{"a": {...}, "b": {...}}``.
    """
    if not result.actions:
        raise ValueError("diagnose_match needs a match played with record_actions=True")
    states_list, actions_list, is_a_list = [], [], []
    for g, actions in enumerate(result.actions):
        states = replay_game(int(result.seeds[g // 2]), actions, dice_mode)
        states_list.append(states)
        actions_list.append(np.asarray(actions, dtype=np.int64))
        is_a_list.append(states[:, S_PLAYER] == g % 2)
    states = np.concatenate(states_list)
    diag = diagnose_decisions(oracle, states, np.concatenate(actions_list))
    is_a = np.concatenate(is_a_list)
    games = len(result.actions)
    return {
        "a": summarize(select_decisions(diag, is_a), games),
        "b": summarize(select_decisions(diag, ~is_a), games),
    }


def select_decisions(diag: DecisionDiagnostics, sel: np.ndarray) -> DecisionDiagnostics:
    """The decisions where ``sel`` (bool [N]) is True."""
    return DecisionDiagnostics(**{k: v[sel] for k, v in diag.__dict__.items()})
