"""Precomputed Yatzy tables: the 252 sorted dice multisets, scores, keeps and reroll outcomes.

Conventions (contracts in docs/reference/yatzy_rules.md; why:
docs/reference/design.md#rules-actions-and-dice):

* categories ``0..14`` in the order of :data:`CATEGORIES`;
* ``avail_mask`` bit ``(14 - cat)`` is 1 when category ``cat`` is open;
* ``upper_total`` is clamped to 63;
* a KeepMask's bit ``(4 - i)`` keeps ``dice[i]`` of the **sorted** dice;
* actions ``0..31`` are keep masks, ``32..46`` are ``Mark(cat = a - 32)``: ``A = 47``.

Dice are never enumerated as the 7,776 ordered rolls: a roll is a multiset (one of 252), a kept
subset is a multiset of size 0..5 (one of 462), and rerolling ``k`` dice is a multinomial
distribution over multisets of size ``k``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

CATEGORIES: tuple[str, ...] = (
    "ones",
    "twos",
    "threes",
    "fours",
    "fives",
    "sixes",
    "pair",
    "two_pairs",
    "three_kind",
    "four_kind",
    "small_straight",
    "large_straight",
    "house",
    "chance",
    "yatzy",
)
NUM_CATEGORIES = 15
NUM_UPPER = 6
UPPER_BONUS_THRESHOLD = 63
UPPER_BONUS = 50
NUM_DICE = 5
NUM_FACES = 6
NUM_DICE_SETS = 252  # sorted 5-dice multisets
NUM_KEPT = 462  # multisets of size 0..5 (kept subsets)
NUM_KEEP_MASKS = 32
MARK_OFFSET = 32
NUM_ACTIONS = 47  # 32 keep masks + 15 marks
KEEP_ALL = 31
FULL_AVAIL = (1 << NUM_CATEGORIES) - 1
MAX_REROLLS = 2
ACTION_SPACE_ID = "oracle_keepmask_v1"
RULESET_ID = "swedish_scandinavian_v1"

POW6 = np.array([6**f for f in range(NUM_FACES)], dtype=np.int64)  # [6] base-6 digit weights


def avail_bit(cat: int) -> int:
    """The ``avail_mask`` bit of category ``cat``: ``1 << (14 - cat)``."""
    return 1 << (NUM_CATEGORIES - 1 - cat)


def keep_bit(i: int) -> int:
    """The KeepMask bit that keeps ``dice[i]`` of the sorted dice: ``1 << (4 - i)``."""
    return 1 << (NUM_DICE - 1 - i)


def _score_reference(dice: tuple[int, ...]) -> list[int]:
    # Plain scoring used only to fill the table; tests compare it with yatzy-solver.
    counts = [dice.count(f) for f in range(1, 7)]
    total = sum(dice)
    scores = [counts[f] * (f + 1) for f in range(6)]
    pairs = [f + 1 for f in range(6) if counts[f] >= 2]
    scores.append(2 * max(pairs) if pairs else 0)  # pair
    scores.append(2 * sum(pairs) if len(pairs) >= 2 else 0)  # two pairs (distinct faces)
    trips = [f + 1 for f in range(6) if counts[f] >= 3]
    scores.append(3 * max(trips) if trips else 0)
    quads = [f + 1 for f in range(6) if counts[f] >= 4]
    scores.append(4 * max(quads) if quads else 0)
    scores.append(15 if sorted(dice) == [1, 2, 3, 4, 5] else 0)
    scores.append(20 if sorted(dice) == [2, 3, 4, 5, 6] else 0)
    is_house = sorted(c for c in counts if c) == [2, 3]
    scores.append(total if is_house else 0)
    scores.append(total)
    scores.append(50 if 5 in counts else 0)
    return scores


def _build() -> dict[str, np.ndarray]:
    # Over 80 lines: a straight-line script run once at import, a few lines a table.
    dice_sets = list(itertools.combinations_with_replacement(range(1, 7), NUM_DICE))
    assert len(dice_sets) == NUM_DICE_SETS
    kept_sets: list[tuple[int, ...]] = []
    for size in range(NUM_DICE + 1):
        kept_sets.extend(itertools.combinations_with_replacement(range(1, 7), size))
    assert len(kept_sets) == NUM_KEPT

    def counts_code(ms: tuple[int, ...]) -> int:
        return int(sum(POW6[v - 1] for v in ms))

    dice = np.array(dice_sets, dtype=np.int64)  # [252, 5]
    counts = np.zeros((NUM_DICE_SETS, NUM_FACES), dtype=np.int64)
    for i, ms in enumerate(dice_sets):
        for v in ms:
            counts[i, v - 1] += 1
    code_to_kept = np.full(6**NUM_FACES, -1, dtype=np.int64)  # [46656]
    kept_code = np.zeros(NUM_KEPT, dtype=np.int64)
    kept_size = np.zeros(NUM_KEPT, dtype=np.int64)
    kept_counts = np.zeros((NUM_KEPT, NUM_FACES), dtype=np.int64)
    dice_index = {ms: i for i, ms in enumerate(dice_sets)}
    kept_to_dice = np.full(NUM_KEPT, -1, dtype=np.int64)
    for k, ms in enumerate(kept_sets):
        code = counts_code(ms)
        code_to_kept[code] = k
        kept_code[k] = code
        kept_size[k] = len(ms)
        for v in ms:
            kept_counts[k, v - 1] += 1
        if len(ms) == NUM_DICE:
            kept_to_dice[k] = dice_index[ms]
    dice_to_kept = np.array([code_to_kept[counts_code(ms)] for ms in dice_sets], dtype=np.int64)

    keep_to_kept = np.zeros((NUM_DICE_SETS, NUM_KEEP_MASKS), dtype=np.int64)  # [252, 32]
    for i, ms in enumerate(dice_sets):
        for mask in range(NUM_KEEP_MASKS):
            kept = tuple(ms[j] for j in range(NUM_DICE) if mask & keep_bit(j))
            keep_to_kept[i, mask] = code_to_kept[counts_code(kept)]

    # Reroll outcomes: from kept multiset K (size s), roll 5 - s dice; the final multiset's
    # probability is the multinomial probability of the rolled part. Stored sparse (CSR).
    ptr = [0]
    to: list[int] = []
    prob: list[float] = []
    for ms in kept_sets:
        n = NUM_DICE - len(ms)
        for rolled in itertools.combinations_with_replacement(range(1, 7), n):
            c = [rolled.count(f) for f in range(1, 7)]
            ways = math.factorial(n) // math.prod(math.factorial(x) for x in c)
            final = tuple(sorted(ms + rolled))
            to.append(dice_index[final])
            prob.append(ways / 6**n)
        ptr.append(len(to))
    # A keep mask is canonical when no smaller mask keeps the same multiset: equal dice make
    # several masks equivalent (same kept dice, same reroll distribution, same keyed outcome).
    canonical = np.zeros((NUM_DICE_SETS, NUM_KEEP_MASKS), dtype=np.bool_)  # [252, 32]
    for i in range(NUM_DICE_SETS):
        seen: set[int] = set()
        for mask in range(NUM_KEEP_MASKS - 1):  # keep-all is never a reroll
            kept = int(keep_to_kept[i, mask])
            if kept not in seen:
                seen.add(kept)
                canonical[i, mask] = True
    scores = np.array([_score_reference(ms) for ms in dice_sets], dtype=np.int64)  # [252, 15]
    # Probability of each multiset on a fresh roll of 5 dice: row 0 of the CSR (kept = empty).
    return {
        "dice": dice,
        "counts": counts,
        "code_to_kept": code_to_kept,
        "kept_code": kept_code,
        "kept_size": kept_size,
        "kept_counts": kept_counts,
        "kept_to_dice": kept_to_dice,
        "dice_to_kept": dice_to_kept,
        "keep_to_kept": keep_to_kept,
        "reroll_ptr": np.array(ptr, dtype=np.int64),
        "reroll_to": np.array(to, dtype=np.int64),
        "reroll_prob": np.array(prob, dtype=np.float64),
        "scores": scores,
        "canonical_keep": canonical,
    }


_T = _build()
DICE: np.ndarray = _T["dice"]  # [252, 5] int64 sorted face values 1..6
COUNTS: np.ndarray = _T["counts"]  # [252, 6] int64 face counts
CODE_TO_KEPT: np.ndarray = _T["code_to_kept"]  # [46656] int64 base-6 counts code -> kept idx
KEPT_CODE: np.ndarray = _T["kept_code"]  # [462] int64 base-6 counts code
KEPT_SIZE: np.ndarray = _T["kept_size"]  # [462] int64 number of dice kept
KEPT_COUNTS: np.ndarray = _T["kept_counts"]  # [462, 6] int64
KEPT_TO_DICE: np.ndarray = _T["kept_to_dice"]  # [462] int64 dice idx for size-5 sets else -1
DICE_TO_KEPT: np.ndarray = _T["dice_to_kept"]  # [252] int64
KEEP_TO_KEPT: np.ndarray = _T["keep_to_kept"]  # [252, 32] int64 (dice idx, keep mask) -> kept
REROLL_PTR: np.ndarray = _T["reroll_ptr"]  # [463] int64 CSR row pointers per kept idx
REROLL_TO: np.ndarray = _T["reroll_to"]  # [nnz] int64 final dice idx
REROLL_PROB: np.ndarray = _T["reroll_prob"]  # [nnz] float64 probability
SCORES: np.ndarray = _T["scores"]  # [252, 15] int64 points per category
CANONICAL_KEEP: np.ndarray = _T["canonical_keep"]  # [252, 32] bool lowest mask per kept multiset
EMPTY_KEPT = 0  # kept idx of the empty multiset (a fresh roll of all five dice)

_DICE_INDEX = {tuple(int(v) for v in row): i for i, row in enumerate(DICE)}


def dice_index(dice: list[int] | tuple[int, ...] | np.ndarray) -> int:
    """Index (0..251) of a 5-dice roll; the dice may be in any order. Raises ValueError."""
    values = tuple(sorted(int(v) for v in dice))
    if len(values) != NUM_DICE or any(v < 1 or v > 6 for v in values):
        raise ValueError(f"dice must be five values in 1..6, got {list(dice)}")
    return _DICE_INDEX[values]


def reroll_distribution(kept: int) -> tuple[np.ndarray, np.ndarray]:
    """(final dice idx [n], probability [n]) after keeping multiset ``kept`` and rerolling."""
    lo, hi = REROLL_PTR[kept], REROLL_PTR[kept + 1]
    return REROLL_TO[lo:hi], REROLL_PROB[lo:hi]


def action_label(action: int, dice: list[int] | tuple[int, ...] | np.ndarray | None = None) -> str:
    """Human-readable action: ``mark pair`` or ``keep 10110`` (with the kept dice if given)."""
    if not 0 <= action < NUM_ACTIONS:
        raise ValueError(f"action must be in 0..{NUM_ACTIONS - 1}, got {action}")
    if action >= MARK_OFFSET:
        return f"mark {CATEGORIES[action - MARK_OFFSET]}"
    label = f"keep {action:05b}"
    if dice is not None:
        values = sorted(int(v) for v in dice)
        kept = [str(values[i]) for i in range(NUM_DICE) if action & keep_bit(i)]
        label += f" ({' '.join(kept) if kept else 'none'})"
    return label
