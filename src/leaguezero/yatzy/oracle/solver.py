"""The exact solitaire oracle: ``yatzy-solver`` behind our state and action conventions.

The solver (Rust core, ``yatzy-scandinavian`` variant, optimal expected score 248.4399894) is
the reference. This module converts both ways between

* our roll state: ``avail_mask`` (bit ``14 - cat`` set = open), ``upper_total`` clamped to 63,
  sorted dice as a multiset index ``0..251``, ``rerolls_left`` ``0..2``, and our actions
  ``0..31`` = KeepMask over sorted dice (bit ``4 - i`` keeps ``dice[i]``), ``32..46`` = Mark;
* the solver's situations (``filled`` bit ``cat`` set = filled; ``rolls`` = rerolls left; no
  "armed" Yatzy bonus in the Scandinavian rules) and action codes (``0..14`` score a category in
  our order, ``15..224`` keep a multiset of 0..4 dice; keep-all is not an option).

The solved table (turn-start values of every ``(filled, upper)``) is built once (≈ 20 s) into the
user's cache directory under a versioned name and loaded in ≈ 0.1 s afterwards. ``Oracle.values``
exports it as a numpy array indexed by our ``[avail_mask, upper_total]`` so that numba kernels
(:mod:`leaguezero.yatzy.oracle.dp`) can play without a Python call per decision.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leaguezero.yatzy.game.rules import S_AVAIL, S_DICE, S_PLAYER, S_REROLLS, S_UPPER
from leaguezero.yatzy.game.tables import (
    DICE,
    FULL_AVAIL,
    KEEP_ALL,
    KEEP_TO_KEPT,
    KEPT_COUNTS,
    KEPT_SIZE,
    MARK_OFFSET,
    NUM_ACTIONS,
    NUM_CATEGORIES,
    NUM_KEPT,
    UPPER_BONUS_THRESHOLD,
)

VARIANT_ID = "yatzy-scandinavian"
TABLE_FORMAT_VERSION = 1  # bump when the file name or what we store in it changes
TABLE_PRECISION = "f64"  # f64 keeps ties exact to the solver's 1e-9 tie epsilon
EXPECTED_START_VALUE = 248.4399894  # the variant's published optimal expected score
NUM_AVAIL = 1 << NUM_CATEGORIES  # 32768 avail masks
NUM_UPPER_TOTALS = UPPER_BONUS_THRESHOLD + 1  # 0..63
TIE_EPS = 1e-9  # options closer than this are tied (the solver's f64 tie_epsilon)
NUM_SOLVER_CODES = 225

log = logging.getLogger(__name__)


class OracleError(ValueError):
    """A problem a user can fix: a bad table file, an impossible state, a malformed request."""


# --- conventions: pure conversions, no solver needed ----------------------------------------


def _reverse15(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    for cat in range(NUM_CATEGORIES):
        out |= ((x >> cat) & 1) << (NUM_CATEGORIES - 1 - cat)
    return out


_ALL_MASKS = np.arange(NUM_AVAIL, dtype=np.int64)
# filled (solver, bit cat) of each avail_mask (ours, bit 14 - cat = open), and back.
FILLED_OF_AVAIL: np.ndarray = _reverse15(FULL_AVAIL & ~_ALL_MASKS)  # [32768] int64
AVAIL_OF_FILLED: np.ndarray = np.argsort(FILLED_OF_AVAIL)  # [32768] int64 (a permutation)


def avail_to_filled(avail_mask: np.ndarray | int) -> np.ndarray | int:
    """The solver's ``filled`` bits (bit ``cat`` set = filled) of our ``avail_mask``."""
    out = FILLED_OF_AVAIL[np.asarray(avail_mask, dtype=np.int64)]
    return int(out) if np.ndim(out) == 0 else out


def filled_to_avail(filled: np.ndarray | int) -> np.ndarray | int:
    """Our ``avail_mask`` of the solver's ``filled`` bits."""
    out = AVAIL_OF_FILLED[np.asarray(filled, dtype=np.int64)]
    return int(out) if np.ndim(out) == 0 else out


@functools.cache
def variant():
    """The solver's ``yatzy-scandinavian`` rule set (cheap to build; cached)."""
    import yatzy_solver as ys

    return ys.Variant(VARIANT_ID)


def _kept_notation(kept: int) -> str:
    faces = [str(f + 1) for f in range(6) for _ in range(int(KEPT_COUNTS[kept, f]))]
    return "keep " + (" ".join(faces) if faces else "-")


@functools.cache
def code_tables() -> tuple[np.ndarray, np.ndarray]:
    """``(kept_to_code [462], code_to_kept [225])`` int64; -1 where there is no counterpart.

    Kept multisets of size 5 (keep-all) have no solver code; codes 0..14 (marks) no kept index.
    Derived from the solver's own notation, so a change in its code order cannot go unnoticed.
    """
    v = variant()
    kept_to_code = np.full(NUM_KEPT, -1, dtype=np.int64)
    code_to_kept = np.full(NUM_SOLVER_CODES, -1, dtype=np.int64)
    for kept in range(NUM_KEPT):
        if KEPT_SIZE[kept] < 5:
            code = int(v.action_code(_kept_notation(kept)))
            kept_to_code[kept] = code
            code_to_kept[code] = kept
    if v.num_action_codes != NUM_SOLVER_CODES or (code_to_kept[NUM_CATEGORIES:] < 0).any():
        raise OracleError("yatzy-solver's action codes changed; this adapter needs updating")
    return kept_to_code, code_to_kept


def action_to_code(dice: int, action: int) -> int:
    """The solver's code of our action (a KeepMask over the sorted dice ``dice`` or a Mark)."""
    if not 0 <= action < NUM_ACTIONS or action == KEEP_ALL:
        raise OracleError(f"action {action} has no solver code (keep-all or out of range)")
    if action >= MARK_OFFSET:
        return action - MARK_OFFSET
    return int(code_tables()[0][KEEP_TO_KEPT[dice, action]])


def code_to_action(dice: int, code: int) -> int:
    """Our action for a solver code; a keep becomes the smallest KeepMask keeping that multiset.

    Raises OracleError if the multiset is not a sub-multiset of the dice.
    """
    if 0 <= code < NUM_CATEGORIES:
        return MARK_OFFSET + code
    kept = code_tables()[1][code] if 0 <= code < NUM_SOLVER_CODES else -1
    masks = np.flatnonzero(KEEP_TO_KEPT[dice, :KEEP_ALL] == kept) if kept >= 0 else []
    if len(masks) == 0:
        raise OracleError(f"solver code {code} is not a keep of dice {DICE[dice].tolist()}")
    return int(masks[0])


def check_board(avail_mask: int, upper_total: int) -> None:
    """Raise OracleError unless ``(avail_mask, upper_total)`` can occur in a game."""
    if not 0 <= avail_mask <= FULL_AVAIL:
        raise OracleError(f"avail_mask must be in 0..{FULL_AVAIL} (15 bits), got {avail_mask}")
    if not 0 <= upper_total <= UPPER_BONUS_THRESHOLD:
        raise OracleError(f"upper_total must be in 0..63 (clamped), got {upper_total}")
    if upper_total > 0 and (avail_mask >> 9) == 0b111111:
        raise OracleError("upper_total > 0 needs at least one filled upper category (ones..sixes)")


def situation_notation(avail_mask: int, upper_total: int, dice: int, rerolls_left: int) -> str:
    """The solver's notation of a roll state, e.g. ``dice 1 3 3 5 6 | rolls 2 | upper 0 | ...``."""
    names = variant().categories
    filled = avail_to_filled(avail_mask)
    filled_names = ",".join(names[c] for c in range(NUM_CATEGORIES) if filled >> c & 1) or "-"
    faces = " ".join(str(int(v)) for v in DICE[dice])
    return f"dice {faces} | rolls {rerolls_left} | upper {upper_total} | filled {filled_names}"


def mover_boards(states: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(avail, upper, dice, rerolls_left)`` int64 [N] of the player to move in each state."""
    states = np.asarray(states, dtype=np.int64).reshape(-1, states.shape[-1])
    player = states[:, S_PLAYER]
    rows = np.arange(len(states))
    avail = states[rows, S_AVAIL + player]
    upper = states[rows, S_UPPER + player]
    return avail, upper, states[:, S_DICE], states[:, S_REROLLS]


# --- the table: built once, cached, loaded -----------------------------------------------------


def default_table_path() -> Path:
    """The cached table: ``<user cache>/oracle/<variant>-<precision>-solver<v>-t<n>.table``."""
    import platformdirs
    import yatzy_solver as ys

    name = f"{VARIANT_ID}-{TABLE_PRECISION}-solver{ys.SOLVER_VERSION}-t{TABLE_FORMAT_VERSION}.table"
    return Path(platformdirs.user_cache_dir("leaguezero")) / "oracle" / name


def ensure_table(path: Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Return the table file's path, building it first (≈ 20 s) if the default one is missing.

    ``path`` overrides the cache location (``--oracle-table``); a given path that does not exist
    is built there. ``progress`` receives a one-line message before a build (default: a log
    warning, so a first ``yz match --a oracle`` is not silent for 20 s). Concurrent processes
    wait on a file lock instead of building twice; the file appears atomically.
    """
    from filelock import FileLock

    path = Path(path) if path is not None else default_table_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():  # another process built it while we waited
            return path
        import yatzy_solver as ys

        (progress or log.warning)(
            f"building the yatzy-solver table once (about 20 s), cached at {path}"
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            ys.Solver.build_table(variant(), str(tmp), precision=TABLE_PRECISION)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class Oracle:
    """A loaded solver plus its turn-start values exported for numba kernels."""

    solver: object  # yatzy_solver.Solver
    path: Path
    values: np.ndarray  # float64 [32768, 64]: expected remaining score at a turn's start

    @property
    def expected_score(self) -> float:
        """The optimal expected solitaire score from an empty board (248.44)."""
        return float(self.values[FULL_AVAIL, 0])

    def option_values(self, states: np.ndarray) -> np.ndarray:
        """Every action's value for the player to move, from the solver's batch API.

        ``states`` int64 [N, STATE_LEN] (roll states, not over). Returns float64 [N, 47]: the
        expected remaining score (future upper bonus included, score so far excluded) after each
        action, NaN where illegal. Every KeepMask that keeps the same multiset gets its value.
        """
        avail, upper, dice, rerolls = mover_boards(states)
        for a, u in zip(avail.tolist(), upper.tolist(), strict=True):
            check_board(a, u)
        if (avail == 0).any():
            raise OracleError("option_values needs states with an open category (game not over)")
        n = len(avail)
        codes, vals, counts = self.solver.option_values_batch(
            FILLED_OF_AVAIL[avail].astype(np.uint32),
            upper.astype(np.uint16),
            np.zeros(n, dtype=np.bool_),
            DICE[dice].astype(np.uint8),
            rerolls.astype(np.uint8),
        )
        dense = variant().dense(codes, vals, counts)  # [N, 225], NaN where illegal
        out = np.full((n, NUM_ACTIONS), np.nan)
        out[:, MARK_OFFSET:] = dense[:, :NUM_CATEGORIES]
        kept_to_code = code_tables()[0]
        keep_codes = kept_to_code[KEEP_TO_KEPT[dice, :KEEP_ALL]]  # [N, 31]
        out[:, :KEEP_ALL] = np.take_along_axis(dense, keep_codes, axis=1)
        out[:, KEEP_ALL] = np.nan
        return out


def _export_values(solver) -> np.ndarray:
    # The solver rejects boards with an upper total but no filled upper category; no game reaches
    # them, so they stay NaN (and no kernel reads them from a reachable state).
    filled = np.repeat(np.arange(NUM_AVAIL, dtype=np.uint32), NUM_UPPER_TOTALS)
    upper = np.tile(np.arange(NUM_UPPER_TOTALS, dtype=np.uint16), NUM_AVAIL)
    ok = ~(((filled & 0b111111) == 0) & (upper > 0))
    by_filled = np.full(NUM_AVAIL * NUM_UPPER_TOTALS, np.nan)
    by_filled[ok] = solver.state_values(filled[ok], upper[ok], np.zeros(int(ok.sum()), bool))
    by_filled = by_filled.reshape(NUM_AVAIL, NUM_UPPER_TOTALS)
    return np.ascontiguousarray(by_filled[FILLED_OF_AVAIL])  # re-index rows by avail_mask


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> Oracle:
    import yatzy_solver as ys

    try:
        solver = ys.Solver.load(str(path), variant())
    except (ValueError, OSError) as err:
        raise OracleError(
            f"cannot load oracle table {path}: {err}; delete it to rebuild, or pass a table "
            f"written by yatzy-solver {ys.SOLVER_VERSION} for {VARIANT_ID}"
        ) from None
    values = _export_values(solver)
    if abs(values[FULL_AVAIL, 0] - EXPECTED_START_VALUE) > 1e-3:
        raise OracleError(f"oracle table {path} gives {values[FULL_AVAIL, 0]:.4f}, not 248.44")
    values.setflags(write=False)
    return Oracle(solver=solver, path=path, values=values)


def load_oracle(
    path: str | os.PathLike | None = None, progress: Callable[[str], None] | None = None
) -> Oracle:
    """Load the oracle (building the cached table on first use); memoised per table path."""
    resolved = ensure_table(Path(path) if path is not None else None, progress)
    return _load(resolved.resolve())
