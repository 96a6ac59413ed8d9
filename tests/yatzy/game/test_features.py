from __future__ import annotations

import math

import numpy as np

from leaguezero.yatzy.game import features, rules, tables
from leaguezero.yatzy.game.rules import S_AVAIL, S_PLAYER, S_SCORE, S_UPPER, STATE_LEN


def _reference_encode(state):
    """The v1 layout written out plainly from the docstring table."""
    me, opp = int(state[S_PLAYER]), 1 - int(state[S_PLAYER])
    dice = int(state[rules.S_DICE])
    f = []
    f += [(state[S_AVAIL + me] >> (14 - c)) & 1 for c in range(15)]
    f += [(state[S_AVAIL + opp] >> (14 - c)) & 1 for c in range(15)]
    f += [state[S_UPPER + me] / 63, state[S_UPPER + opp] / 63]
    f += [float(state[S_UPPER + me] == 63), float(state[S_UPPER + opp] == 63)]
    f += [state[S_SCORE + me] / 375, state[S_SCORE + opp] / 375]
    f += [math.tanh((state[S_SCORE + me] - state[S_SCORE + opp]) / 50)]
    onehot = [0.0] * 36
    for face in range(6):
        onehot[6 * face + tables.COUNTS[dice, face]] = 1.0
    f += onehot
    f += [float(state[rules.S_REROLLS] == r) for r in range(3)]
    f += [
        tables.SCORES[dice, c] / 50 if (state[S_AVAIL + me] >> (14 - c)) & 1 else 0.0
        for c in range(15)
    ]
    f += [(15 - bin(state[S_AVAIL + me]).count("1")) / 15]
    f += [(15 - bin(state[S_AVAIL + opp]).count("1")) / 15]
    f += [float(me)]
    return np.array(f, np.float32)


def _random_states(n, seed=0):
    rng = np.random.default_rng(seed)
    legal = np.zeros(47, np.bool_)
    out = []
    for g in range(n):
        s = np.zeros(STATE_LEN, np.int64)
        rules.new_match(s, g, rules.DICE_KEYED)
        for _ in range(rng.integers(0, 80)):
            if rules.is_terminal(s):
                break
            rules.legal_mask(s, legal)
            rules.apply_action(s, int(rng.choice(np.flatnonzero(legal))))
        if not rules.is_terminal(s):
            out.append(s)
    return out


def test_encoder_matches_reference():
    states = _random_states(60)
    batch = np.stack(states)
    out = np.zeros((len(states), features.NUM_FEATURES), np.float32)
    features.encode_batch(batch, np.arange(len(states)), out)
    for s, row in zip(states, out, strict=True):
        np.testing.assert_allclose(row, _reference_encode(s), atol=1e-6)


def test_swapping_players_mirrors_the_encoding():
    for s in _random_states(30, seed=1):
        mirrored = s.copy()
        for base in (S_AVAIL, S_UPPER, S_SCORE):
            mirrored[base], mirrored[base + 1] = s[base + 1], s[base]
        mirrored[S_PLAYER] = 1 - s[S_PLAYER]
        a, b = features.encode(s), features.encode(mirrored)
        seat = features.OFF_SEAT
        np.testing.assert_array_equal(np.delete(a, seat), np.delete(b, seat))
        assert a[seat] + b[seat] == 1.0
