"""``yz play``: a person plays a 2-player match against an agent in the terminal.

The screen shows both score cards (points in filled boxes), a column with what the current dice
would score in each open box, and the agent's rolls and choices as a player would see them.
:data:`HELP` lists the commands; ``hint`` shows the oracle's best options with the expected final
score of each, and after each of your moves the oracle says what it would have done. The moves,
verdicts and hints read as the web page's do (:mod:`leaguezero.yatzy.agents.text`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.agents.text import (
    describe_move,
    move_text,
    oracle_hint,
    oracle_verdict,
    play_move,
    upper_total,
)
from leaguezero.yatzy.game.rules import (
    DICE_KEYED,
    S_AVAIL,
    S_DICE,
    S_PLAYER,
    S_REROLLS,
    S_SCORE,
    STATE_LEN,
    is_legal,
    is_terminal,
    new_match,
)
from leaguezero.yatzy.game.tables import (
    CATEGORIES,
    DICE,
    KEEP_ALL,
    MARK_OFFSET,
    SCORES,
    UPPER_BONUS,
    UPPER_BONUS_THRESHOLD,
    keep_bit,
)

HELP = """Commands:
  keep 3 3 5     keep these dice values and reroll the others (also: keep 01100, a mask
                 over the sorted dice)
  reroll         reroll all five dice
  mark pair      score the dice in a box, by its name or the start of one (mark sm is
                 small_straight); mark 1 .. mark 6 score ones .. sixes
  hint           the oracle's best options and the expected final score of each
  help           this list
  quit           leave the game"""


def parse_move(text: str, dice: list[int]) -> int:
    """The action index a typed move names; raises ValueError with a hint when it names none."""
    words = text.strip().lower().split()
    if not words:
        raise ValueError("type a move, e.g. keep 3 3, mark pair, hint, help or quit")
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
        return MARK_OFFSET + parse_box(" ".join(args))
    raise ValueError(f"unknown move {verb!r}: type help for the commands")


def parse_box(text: str) -> int:
    """The box a player names: its name (``two pairs`` or ``two_pairs``), the start of exactly
    one name (``sm`` is ``small_straight``) or a face ``1``..``6`` (``ones``..``sixes``, what a
    player means by ``mark 6``). Raises ValueError naming the candidates otherwise."""
    name = "_".join(text.lower().split())
    if not name:
        raise ValueError("mark takes a box: its name (e.g. mark pair) or a face 1..6")
    if name.isdigit():
        if 1 <= int(name) <= 6:
            return int(name) - 1
        raise ValueError(f"mark {name}: numbers 1..6 mark ones..sixes; name any other box")
    if name in CATEGORIES:
        return CATEGORIES.index(name)
    found = [cat for cat, box in enumerate(CATEGORIES) if box.startswith(name)]
    if len(found) == 1:
        return found[0]
    if found:
        boxes = ", ".join(CATEGORIES[cat] for cat in found)
        raise ValueError(f"mark {name}: which one? {boxes}")
    raise ValueError(f"unknown box {name!r}: one of {', '.join(CATEGORIES)}")


def render(state: np.ndarray, human: int, filled: list[dict[int, int]] | None = None) -> str:
    """Both score cards (points in filled boxes, ``.`` in open ones), what your current dice
    would score in each of your open boxes, the dice and the rerolls left, as plain text.

    ``filled[seat][cat]`` holds the points marked in each filled box (without the upper bonus);
    without it a filled box shows ``x``.
    """
    seat_names = ("you", "agent") if human == 0 else ("agent", "you")
    your_turn = not is_terminal(state) and state[S_PLAYER] == human
    now_label = "your dice would score" if your_turn else ""
    lines = [f"{'box':>17} {seat_names[0]:>6} {seat_names[1]:>6}   {now_label}".rstrip()]
    dice = int(state[S_DICE])
    for cat, name in enumerate(CATEGORIES):
        cells = []
        for p in range(2):
            if (state[S_AVAIL + p] >> (14 - cat)) & 1:
                cells.append(".")
            else:
                cells.append(str(filled[p].get(cat, "x")) if filled is not None else "x")
        open_for_you = (state[S_AVAIL + human] >> (14 - cat)) & 1
        now = SCORES[dice, cat] if your_turn and open_for_you else ""
        lines.append(f"{name:>17} {cells[0]:>6} {cells[1]:>6}   {now}".rstrip())
    uppers = [upper_total(state, seat, filled) for seat in range(2)]
    bonus = [UPPER_BONUS if upper >= UPPER_BONUS_THRESHOLD else "." for upper in uppers]
    lines.append(
        f"{'upper total':>17} {uppers[0]:>6} {uppers[1]:>6}   "
        f"({UPPER_BONUS_THRESHOLD} or more earns the {UPPER_BONUS}-point bonus)\n"
        f"{'upper bonus':>17} {bonus[0]:>6} {bonus[1]:>6}\n"
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
    filled: list[dict[int, int]] = [{}, {}]
    first = "you move first" if human == 0 else f"{agent.name} moves first"
    say(f"you play {agent.name}; {first}. Type help for the commands.")
    values_of = None
    if oracle is not None:
        from leaguezero.yatzy.agents.oracle import OracleAgent

        values_of = OracleAgent(oracle=oracle).action_values
    while not is_terminal(state):
        if state[S_PLAYER] != human:
            action = int(agent.act(state[None, :], np.array([0]))[0])
            dice = [int(v) for v in DICE[state[S_DICE]]]
            rerolls = int(state[S_REROLLS])
            points = play_move(state, action, filled)
            say(f"agent {describe_move(action, dice, rerolls, points)}")
            continue
        say(render(state, human, filled))
        dice = [int(v) for v in DICE[state[S_DICE]]]
        values = values_of(state[None, :])[0] if values_of is not None else None
        while True:
            text = ask("your move> ")
            if text.strip().lower() in ("quit", "q", "exit"):
                raise KeyboardInterrupt
            if text.strip().lower() in ("help", "commands"):
                say(HELP)
                continue
            if text.strip().lower() in ("hint", "h", "?"):
                score = int(state[S_SCORE + human])
                say(oracle_hint(values, dice, score) if values is not None else "no oracle loaded")
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
                say(f"{move_text(action, dice)} is not legal now (that box is filled?)")
                continue
            break
        if values is not None:
            say(f"oracle: {oracle_verdict(values, action, dice)}")
        rerolls = int(state[S_REROLLS])
        points = play_move(state, action, filled)
        if action >= MARK_OFFSET:  # which box it was, so a typed name is never a surprise
            say(f"you {describe_move(action, dice, rerolls, points)}")
    say(render(state, human, filled))
    return int(state[S_SCORE + human]), int(state[S_SCORE + 1 - human])
