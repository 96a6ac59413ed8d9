"""``yz play``: a person plays a 2-player match against an agent in the terminal.

Moves are typed as ``keep 3 3 5`` (the dice values to keep), ``keep 01100`` (a KeepMask over the
sorted dice), ``reroll`` (keep nothing), or ``mark pair`` / ``mark 6`` (a category name or
index). ``hint`` asks the oracle for its best move and the value of every option; after each of
your moves the oracle says what it would have done and how many expected points you lost.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from leaguezero.yatzy.agents import Agent
from leaguezero.yatzy.rules import (
    DICE_KEYED,
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    S_UPPER,
    STATE_LEN,
    apply_action,
    is_legal,
    is_terminal,
    new_match,
)
from leaguezero.yatzy.tables import (
    CATEGORIES,
    DICE,
    KEEP_ALL,
    MARK_OFFSET,
    SCORES,
    action_label,
    keep_bit,
)


def parse_move(text: str, dice: list[int]) -> int:
    """The action index a typed move names; raises ValueError with a hint when it names none."""
    words = text.strip().lower().split()
    if not words:
        raise ValueError("type a move, e.g. 'keep 3 3', 'mark pair', 'hint' or 'quit'")
    verb, args = words[0], words[1:]
    if verb in ("reroll", "r"):
        return 0
    if verb in ("keep", "k"):
        if len(args) == 1 and len(args[0]) == 5 and set(args[0]) <= {"0", "1"}:
            return int(args[0], 2)
        want = [int(a) for a in args if a.isdigit()]
        mask, used = 0, [False] * 5
        for v in want:
            for i in range(5):
                if not used[i] and dice[i] == v:
                    used[i] = True
                    mask |= keep_bit(i)
                    break
            else:
                raise ValueError(f"there is no unused die showing {v} in {dice}")
        return mask
    if verb in ("mark", "m"):
        if len(args) != 1:
            raise ValueError("mark takes one category: a name (e.g. pair) or its index 0..14")
        name = args[0]
        if name.isdigit() and 0 <= int(name) < len(CATEGORIES):
            return MARK_OFFSET + int(name)
        if name in CATEGORIES:
            return MARK_OFFSET + CATEGORIES.index(name)
        raise ValueError(f"unknown category {name!r}: one of {', '.join(CATEGORIES)}")
    raise ValueError(f"unknown move {verb!r}: keep ..., reroll, mark CATEGORY, hint, quit")


def render(state: np.ndarray, human: int) -> str:
    """Both score cards, the dice and the rerolls left, as plain text."""
    seat_names = ("you", "agent") if human == 0 else ("agent", "you")
    lines = [f"{'category':>17} {seat_names[0]:>6} {seat_names[1]:>6}"]
    dice = int(state[S_DICE])
    for cat, name in enumerate(CATEGORIES):
        cells = []
        for p in range(2):
            open_ = (state[S_AVAIL + p] >> (14 - cat)) & 1
            cells.append("." if open_ else "x")
        now = SCORES[dice, cat] if (state[S_AVAIL + human] >> (14 - cat)) & 1 else ""
        lines.append(f"{cat:>2} {name:>14} {cells[0]:>6} {cells[1]:>6}   {now}")
    lines.append(
        f"{'upper':>17} {state[S_UPPER]:>6} {state[S_UPPER + 1]:>6}\n"
        f"{'score':>17} {state[S_SCORE]:>6} {state[S_SCORE + 1]:>6}"
    )
    if not is_terminal(state):
        who = "you" if state[S_PLAYER] == human else "agent"
        lines.append(
            f"dice {' '.join(str(v) for v in DICE[dice])}   rerolls left {state[S_REROLLS]}   "
            f"({who} to move)"
        )
    return "\n".join(lines)


def play_game(
    agent: Agent,
    seed: int,
    human: int,
    ask: Callable[[str], str],
    say: Callable[[str], None],
    oracle=None,
) -> tuple[int, int]:
    """Play one game; returns (your score, agent's score). ``ask`` reads a line from the person."""
    state = np.zeros(STATE_LEN, np.int64)
    new_match(state, seed, DICE_KEYED)
    values_of = None
    if oracle is not None:
        from leaguezero.yatzy.oracle_agent import OracleAgent

        values_of = OracleAgent(oracle=oracle).action_values
    while not is_terminal(state):
        if state[S_PLAYER] != human:
            action = int(agent.act(state[None, :], np.array([0]))[0])
            dice = list(DICE[state[S_DICE]])
            apply_action(state, action)
            say(f"agent: {action_label(action, dice)}")
            continue
        say(render(state, human))
        dice = [int(v) for v in DICE[state[S_DICE]]]
        values = values_of(state[None, :])[0] if values_of is not None else None
        while True:
            text = ask("your move> ")
            if text.strip().lower() in ("quit", "q", "exit"):
                raise KeyboardInterrupt
            if text.strip().lower() in ("hint", "h", "?"):
                say(_hint(values, dice) if values is not None else "no oracle loaded")
                continue
            try:
                action = parse_move(text, dice)
            except ValueError as err:
                say(str(err))
                continue
            if action == KEEP_ALL and state[S_REROLLS] > 0:
                say("keeping all five dice wastes a reroll (illegal): mark a category instead")
                continue
            if not is_legal(state, action):
                say(f"{action_label(action, dice)} is not legal now")
                continue
            break
        if values is not None:
            best = int(np.nanargmax(values))
            lost = float(np.nanmax(values) - values[action])
            verdict = (
                "the oracle agrees"
                if lost < 1e-9
                else (f"the oracle would {action_label(best, dice)}; you lost {lost:.2f} points")
            )
            say(f"oracle: {verdict}")
        apply_action(state, action)
    say(render(state, human))
    return int(state[S_SCORE + human]), int(state[S_SCORE + 1 - human])


def _hint(values: np.ndarray, dice: list[int]) -> str:
    order = np.argsort(-np.nan_to_num(values, nan=-1e9))
    seen, lines = set(), []
    for a in order:
        if np.isnan(values[a]) or round(float(values[a]), 6) in seen:
            continue  # equal-valued KeepMasks over equal dice: show one
        seen.add(round(float(values[a]), 6))
        lines.append(f"  {action_label(int(a), dice):<32} {values[a]:8.2f}")
        if len(lines) == 5:
            break
    return "oracle's best options (expected remaining score):\n" + "\n".join(lines)
