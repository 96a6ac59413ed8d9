"""Readable (JSON) form of a match state, for logs, recorded games and tools."""

from __future__ import annotations

from typing import Any

import numpy as np

from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    DICE_RNG,
    S_AVAIL,
    S_DICE,
    S_DICE_MODE,
    S_MARKS,
    S_PLAYER,
    S_REROLLS,
    S_RNG,
    S_SCORE,
    S_SEED,
    S_UPPER,
    STATE_LEN,
)
from leaguezero.yatzy.game.tables import DICE, FULL_AVAIL, dice_index

STATE_SCHEMA_VERSION = 1
_MODES = {DICE_KEYED: "keyed", DICE_RNG: "rng"}


def state_to_dict(state: np.ndarray) -> dict[str, Any]:
    """A JSON-able dict that :func:`state_from_dict` turns back into the same state."""
    return {
        "schema_version": STATE_SCHEMA_VERSION,
        "avail_mask": [int(state[S_AVAIL]), int(state[S_AVAIL + 1])],
        "upper_total": [int(state[S_UPPER]), int(state[S_UPPER + 1])],
        "score": [int(state[S_SCORE]), int(state[S_SCORE + 1])],
        "dice": [int(v) for v in DICE[state[S_DICE]]],
        "rerolls_left": int(state[S_REROLLS]),
        "player_to_move": int(state[S_PLAYER]),
        "seed": int(state[S_SEED]),
        "rng": int(state[S_RNG]),
        "dice_mode": _MODES[int(state[S_DICE_MODE])],
        "marks": int(state[S_MARKS]),
    }


def state_from_dict(data: dict[str, Any]) -> np.ndarray:
    """Parse :func:`state_to_dict` output; raises ValueError naming a bad or missing field."""
    version = data.get("schema_version")
    if version != STATE_SCHEMA_VERSION:
        raise ValueError(f"state schema_version {version!r} is not {STATE_SCHEMA_VERSION}")
    try:
        state = np.zeros(STATE_LEN, dtype=np.int64)
        for p in range(2):
            avail = int(data["avail_mask"][p])
            upper = int(data["upper_total"][p])
            if not 0 <= avail <= FULL_AVAIL:
                raise ValueError(f"avail_mask[{p}] must be in 0..{FULL_AVAIL}")
            if not 0 <= upper <= 63:
                raise ValueError(f"upper_total[{p}] must be in 0..63")
            state[S_AVAIL + p] = avail
            state[S_UPPER + p] = upper
            state[S_SCORE + p] = int(data["score"][p])
        state[S_DICE] = dice_index(data["dice"])
        rerolls = int(data["rerolls_left"])
        if not 0 <= rerolls <= 2:
            raise ValueError("rerolls_left must be 0, 1 or 2")
        state[S_REROLLS] = rerolls
        player = int(data["player_to_move"])
        if player not in (0, 1):
            raise ValueError("player_to_move must be 0 or 1")
        state[S_PLAYER] = player
        state[S_SEED] = int(data["seed"])
        state[S_RNG] = int(data["rng"])
        mode = {v: k for k, v in _MODES.items()}.get(data["dice_mode"])
        if mode is None:
            raise ValueError("dice_mode must be 'keyed' or 'rng'")
        state[S_DICE_MODE] = mode
        state[S_MARKS] = int(data["marks"])
    except KeyError as err:
        raise ValueError(f"state is missing field {err.args[0]!r}") from None
    return state
