"""Yatzy rules and the 2-player match as numba kernels over a flat ``int64`` state vector.

A match state is ``int64[STATE_LEN]``; the named offsets below index it. Copying a state is a
16-element copy, which is what search does at every simulation. All kernels are ``njit`` with
``cache=True`` and allocate nothing per step; the tables come from
:mod:`leaguezero.yatzy.game.tables` (frozen into the compiled code as constants).

Turn flow: the player to move has an initial roll (``rerolls_left = 2``); each KeepMask rerolls
the other dice (``rerolls_left -= 1``); a Mark scores the dice, passes the turn and rolls for the
next player. The match is over when both boards are full (30 marks).

Dice come from one of two sources, chosen per state by ``state[S_DICE_MODE]``:

* ``DICE_KEYED`` (evaluation, gating): the event-keyed stream
  (docs/reference/design.md#rules-actions-and-dice). The event
  ``(episode_seed, player, round_idx, roll_idx)`` defines five values; rerolling ``k`` dice takes
  the first ``k``. Outcomes therefore depend only on the event, never on which of two equal dice
  was rerolled or on what the opponent did.
* ``DICE_RNG`` (self-play, search): a 32-bit counter-based generator stored in ``state[S_RNG]``.
  Search switches copies of the root to this mode so that it cannot peek at the keyed future.
"""

from __future__ import annotations

from numba import njit

from leaguezero.yatzy.game.tables import (
    CANONICAL_KEEP,
    CODE_TO_KEPT,
    FULL_AVAIL,
    KEEP_TO_KEPT,
    KEPT_CODE,
    KEPT_SIZE,
    KEPT_TO_DICE,
    MARK_OFFSET,
    NUM_ACTIONS,
    NUM_CATEGORIES,
    NUM_KEEP_MASKS,
    POW6,
    SCORES,
    UPPER_BONUS,
    UPPER_BONUS_THRESHOLD,
)

# --- state layout ---------------------------------------------------------------------------
S_AVAIL = 0  # [0], [1]: avail_mask of player 0 / 1 (bit 14 - cat set = open)
S_UPPER = 2  # [2], [3]: upper_total clamped to 63
S_SCORE = 4  # [4], [5]: total score including the upper bonus
S_DICE = 6  # index 0..251 of the sorted dice multiset
S_REROLLS = 7  # rerolls_left 0..2
S_PLAYER = 8  # player_to_move 0 | 1
S_SEED = 9  # episode seed (0 <= seed < 2**62)
S_RNG = 10  # generator counter for DICE_RNG mode (0 <= rng < 2**32)
S_DICE_MODE = 11  # DICE_KEYED | DICE_RNG
S_MARKS = 12  # marks made so far by both players (0..30)
STATE_LEN = 16

DICE_KEYED = 0
DICE_RNG = 1

_M32 = 0xFFFFFFFF
_GOLDEN32 = 0x9E3779B9


@njit(cache=True, inline="always")
def mix32(x):
    """A 32-bit integer hash (xorshift-multiply); inputs/outputs in 0..2**32-1 as int64.

    The multipliers are below 2**31 so every product fits in int64 with or without the JIT.
    """
    x = x & _M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x5BD1E995) & _M32
    x ^= x >> 16
    return x


@njit(cache=True, inline="always")
def _face(h):
    # Maps a 32-bit hash to 1..6 by multiply-shift (bias < 2**-29).
    return ((h * 6) >> 32) + 1


@njit(cache=True)
def keyed_die(seed, player, round_idx, roll_idx, j):
    """Die ``j`` (0..4) of the event ``(seed, player, round_idx, roll_idx)``: a value 1..6."""
    h = mix32(seed & _M32)
    h = mix32(h ^ ((seed >> 32) & _M32))
    h = mix32(h ^ ((player << 12) | (round_idx << 4) | roll_idx) ^ _GOLDEN32)
    return _face(mix32(h ^ (((j + 1) * 0x27D4EB2D) & _M32)))


@njit(cache=True, inline="always")
def popcount15(mask):
    n = 0
    while mask:
        mask &= mask - 1
        n += 1
    return n


@njit(cache=True)
def _next_die(state, player, round_idx, roll_idx, j):
    if state[S_DICE_MODE] == DICE_KEYED:
        return keyed_die(state[S_SEED], player, round_idx, roll_idx, j)
    state[S_RNG] = (state[S_RNG] + _GOLDEN32) & _M32
    return _face(mix32(state[S_RNG]))


@njit(cache=True)
def _roll(state, kept, player, roll_idx):
    """Reroll the dice not in multiset ``kept`` and store the new dice index."""
    round_idx = NUM_CATEGORIES - popcount15(state[S_AVAIL + player])
    code = KEPT_CODE[kept]
    for j in range(5 - KEPT_SIZE[kept]):
        code += POW6[_next_die(state, player, round_idx, roll_idx, j) - 1]
    state[S_DICE] = KEPT_TO_DICE[CODE_TO_KEPT[code]]


@njit(cache=True)
def new_match(state, seed, dice_mode):
    """Reset ``state`` to a new match (player 0 to move, first roll done)."""
    for i in range(STATE_LEN):
        state[i] = 0
    state[S_AVAIL] = FULL_AVAIL
    state[S_AVAIL + 1] = FULL_AVAIL
    state[S_SEED] = seed
    state[S_RNG] = mix32(seed ^ (seed >> 32))
    state[S_DICE_MODE] = dice_mode
    state[S_REROLLS] = 2
    _roll(state, 0, 0, 0)


@njit(cache=True)
def is_terminal(state):
    """True when both boards are full."""
    return state[S_AVAIL] == 0 and state[S_AVAIL + 1] == 0


@njit(cache=True)
def mark_points(avail, upper, dice, cat):
    """(points including any upper bonus, new upper_total) of marking ``cat``; -1 if filled."""
    if not (avail >> (14 - cat)) & 1:
        return -1, upper
    points = SCORES[dice, cat]
    new_upper = upper
    if cat < 6:
        new_upper = min(UPPER_BONUS_THRESHOLD, upper + points)
        if upper < UPPER_BONUS_THRESHOLD and upper + points >= UPPER_BONUS_THRESHOLD:
            points += UPPER_BONUS
    return points, new_upper


@njit(cache=True)
def legal_mask_into(avail, rerolls_left, out):
    """Fill ``out`` (bool [47]) with the legal actions of a roll state; returns the count.

    Marks are legal for open categories at every roll stage; keep masks 0..30 while rerolls
    remain (keep-all, 31, would waste a reroll and is illegal).
    """
    n = 0
    for a in range(NUM_KEEP_MASKS):
        ok = rerolls_left > 0 and a != NUM_KEEP_MASKS - 1
        out[a] = ok
        n += ok
    for cat in range(NUM_CATEGORIES):
        ok = (avail >> (14 - cat)) & 1 == 1
        out[MARK_OFFSET + cat] = ok
        n += ok
    return n


@njit(cache=True)
def legal_mask(state, out):
    """Legal actions (bool [47]) of the player to move; all False once the match is over."""
    if is_terminal(state):
        for a in range(NUM_ACTIONS):
            out[a] = False
        return 0
    return legal_mask_into(state[S_AVAIL + state[S_PLAYER]], state[S_REROLLS], out)


@njit(cache=True)
def is_legal(state, action):
    if action < 0 or action >= NUM_ACTIONS or is_terminal(state):
        return False
    if action < MARK_OFFSET:
        return state[S_REROLLS] > 0 and action != NUM_KEEP_MASKS - 1
    return (state[S_AVAIL + state[S_PLAYER]] >> (14 - (action - MARK_OFFSET))) & 1 == 1


@njit(cache=True)
def apply_action(state, action):
    """Apply a legal action in place; returns the points scored (0 for a keep).

    Raises ValueError for an illegal action (the check is a few integer ops).
    """
    if not is_legal(state, action):
        raise ValueError("illegal action")
    player = state[S_PLAYER]
    if action < MARK_OFFSET:
        kept = KEEP_TO_KEPT[state[S_DICE], action]
        roll_idx = 3 - state[S_REROLLS]  # rerolls_left 2 -> roll 1, 1 -> roll 2
        _roll(state, kept, player, roll_idx)
        state[S_REROLLS] -= 1
        return 0
    cat = action - MARK_OFFSET
    points, new_upper = mark_points(
        state[S_AVAIL + player], state[S_UPPER + player], state[S_DICE], cat
    )
    state[S_AVAIL + player] &= ~(1 << (14 - cat))
    state[S_UPPER + player] = new_upper
    state[S_SCORE + player] += points
    state[S_MARKS] += 1
    if is_terminal(state):
        state[S_REROLLS] = 0
        return points
    nxt = 1 - player
    state[S_PLAYER] = nxt
    state[S_REROLLS] = 2
    _roll(state, 0, nxt, 0)
    return points


@njit(cache=True)
def outcome(state, player):
    """+1 win, 0 draw, -1 loss for ``player`` (meaningful once the match is over)."""
    diff = state[S_SCORE + player] - state[S_SCORE + 1 - player]
    if diff > 0:
        return 1
    if diff < 0:
        return -1
    return 0


@njit(cache=True)
def scores_for_dice_values(dice, out):
    """Score five die values (any order) in all 15 categories into ``out`` (int64 [15]).

    Computed from the values, not the table: the kernel behind ``yz rules score``, checked
    against the plain-Python reference and yatzy-solver.
    """
    packed = 0  # 3 bits per face: no array allocation per call
    total = 0
    for v in dice:
        packed += 1 << (3 * v)
        total += v
    best_pair = 0
    pair_sum = 0
    n_pairs = 0
    trips = 0
    quads = 0
    yatzy = False
    has3 = False
    has2 = False
    for f in range(1, 7):
        c = (packed >> (3 * f)) & 7
        out[f - 1] = c * f
        if c >= 2:
            best_pair = f
            pair_sum += f
            n_pairs += 1
        if c >= 3:
            trips = f
        if c >= 4:
            quads = f
        if c == 5:
            yatzy = True
        if c == 3:
            has3 = True
        if c == 2:
            has2 = True
    # 1-2-3-4-5 and 2-3-4-5-6 each have one die per face: compare the packed counts.
    straight_small = packed == 0o111110
    straight_large = packed == 0o1111100
    out[6] = 2 * best_pair
    out[7] = 2 * pair_sum if n_pairs >= 2 else 0
    out[8] = 3 * trips
    out[9] = 4 * quads
    out[10] = 15 if straight_small else 0
    out[11] = 20 if straight_large else 0
    out[12] = total if (has3 and has2) else 0
    out[13] = total
    out[14] = 50 if yatzy else 0


@njit(cache=True)
def scores_for_dice_batch(dice, out):
    """Score a batch of rolls: ``dice`` int64 [N, 5] -> ``out`` int64 [N, 15]."""
    for i in range(dice.shape[0]):
        scores_for_dice_values(dice[i], out[i])


@njit(cache=True)
def apply_actions_batch(states, rows, actions):
    """Apply ``actions[j]`` to ``states[rows[j]]`` for every j; states int64 [G, STATE_LEN]."""
    for j in range(rows.shape[0]):
        apply_action(states[rows[j]], actions[j])


@njit(cache=True)
def new_matches(states, seeds, dice_mode):
    """Reset every row of ``states`` (int64 [G, STATE_LEN]) to a new match with its seed."""
    for g in range(states.shape[0]):
        new_match(states[g], seeds[g], dice_mode)


@njit(cache=True)
def terminal_mask(states, out):
    """``out[g] = is_terminal(states[g])`` for every row; returns how many are over."""
    n = 0
    for g in range(states.shape[0]):
        out[g] = is_terminal(states[g])
        n += out[g]
    return n


@njit(cache=True)
def policy_mask(state, out):
    """Legal actions with one KeepMask per distinct kept multiset (the policy's support).

    Masks that keep equal multisets (e.g. either of two equal dice) lead to the same reroll
    distribution and, with keyed dice, the same outcome, so search and the policy use only the
    lowest such mask; the others stay legal moves. Returns the count. ``out`` bool [47].
    """
    n = legal_mask(state, out)
    if n == 0 or state[S_REROLLS] == 0:
        return n
    dice = state[S_DICE]
    for a in range(NUM_KEEP_MASKS):
        if out[a] and not CANONICAL_KEEP[dice, a]:
            out[a] = False
            n -= 1
    return n


@njit(cache=True)
def policy_mask_batch(states, rows, out):
    """``out[j] = policy_mask(states[rows[j]])``; out bool [len(rows), 47]."""
    for j in range(rows.shape[0]):
        policy_mask(states[rows[j]], out[j])
