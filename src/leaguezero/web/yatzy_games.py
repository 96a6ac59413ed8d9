"""The web app's one door into Yatzy: a game of a person against an agent, move by move.

Every import of Yatzy internals (rules, agents, oracle, the table's texts) is in this module,
so a reshaped ``yatzy`` package is re-pointed here only. The game logic is ``yz play``'s
(:mod:`leaguezero.yatzy.agents.play`): the same move descriptions, oracle judgment and hints
(:mod:`leaguezero.yatzy.agents.text`); this module turns its blocking loop into calls a page can
make one at a time.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from leaguezero.yatzy.agents.registry import BOT_NAMES, PRETRAINED
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
    NUM_UPPER,
    SCORES,
    UPPER_BONUS,
    UPPER_BONUS_THRESHOLD,
    keep_bit,
)

# What the page offers by name: every built-in agent, greedy (the default) and the shipped
# network first.
AGENT_CHOICES = ("greedy", PRETRAINED, *(name for name in BOT_NAMES if name != "greedy"))
CHECKPOINT_HINT = "model:runs/ID/models/best.pt"  # where yz run keeps its best network
RUN_SPEC = "run:"  # run:N, the best network of the server's N-th --run (a path never travels)
# The card's boxes in words (the rules' identifiers stay the API's names: ``mark`` takes either).
BOX_WORDS = {
    "ones": "Ones", "twos": "Twos", "threes": "Threes", "fours": "Fours", "fives": "Fives",
    "sixes": "Sixes", "pair": "One pair", "two_pairs": "Two pairs",
    "three_kind": "Three of a kind", "four_kind": "Four of a kind",
    "small_straight": "Small straight", "large_straight": "Large straight",
    "house": "Full house", "chance": "Chance", "yatzy": "Yatzy",
}  # fmt: skip
# yz play's texts name boxes by identifier; the page's say the ones with an underscore in words
# (the others, "pair", "chance", ..., read as words already).
_IDENTIFIER = re.compile(r"\b(" + "|".join(k for k in BOX_WORDS if "_" in k) + r")\b")


def in_words(text: str) -> str:
    """``text`` with the box identifiers ``two_pairs``, ``three_kind``, ... in words."""
    return _IDENTIFIER.sub(lambda m: BOX_WORDS[m.group(1)].lower(), text)


MAX_LOG = 200  # lines of the move log kept per game


class MoveError(ValueError):
    """A move the page sent that is not legal now; the message says why (shown to the player)."""


def make_opponent(spec: str, seed: int, sims: int):
    """The agent named by ``spec`` (a bot, ``pretrained``, ``model:PATH`` or a ``.pt`` path),
    its options capped by :func:`~leaguezero.web.limits.cap_yatzy_spec`.

    Raises ValueError with a one-line reason. A checkpoint that cannot be loaded gets one answer
    whether it is missing, not a file or damaged, naming only the file's name: an answer must not
    tell which files exist on this machine.
    """
    from leaguezero.web.limits import cap_yatzy_spec
    from leaguezero.yatzy.agents.registry import MODEL_PREFIX, checkpoint_name, make_agent
    from leaguezero.yatzy.config import load_yatzy_config
    from leaguezero.yatzy.search.settings import evaluation_settings

    spec = cap_yatzy_spec(spec.strip())
    settings = evaluation_settings(load_yatzy_config(), sims)
    model = checkpoint_name(spec)
    if model is None:
        return make_agent(spec, seed=seed, settings=settings)  # a bot or pretrained
    name = Path(model.partition("?")[0].removeprefix(MODEL_PREFIX)).name[:60]
    try:
        return make_agent(model, seed=seed, settings=settings)
    except Exception:
        raise ValueError(
            f"cannot load {name!r}: no such file, or not a Yatzy checkpoint "
            "(give model:runs/ID/models/best.pt)"
        ) from None


def agent_hints() -> dict[str, str]:
    """What the page says about the agents it offers (a checkpoint's spelling among them)."""
    return {"checkpoint": CHECKPOINT_HINT}


def run_best(run: Path) -> Path | None:
    """A yz run's current best network (``models/best.pt``), None when it has none yet."""
    best = Path(run) / "models" / "best.pt"
    return best if best.is_file() else None


def run_opponents(runs: list[Path]) -> list[dict[str, str]]:
    """The ``--run`` folders' best networks as opponents: ``run:N`` and what the page calls it
    (the folder's name: an answer never carries a path)."""
    return [
        {"spec": f"{RUN_SPEC}{i}", "name": f"best of {Path(run).name}"}
        for i, run in enumerate(runs)
        if run_best(run) is not None
    ]


def resolve_run_spec(spec: str, runs: list[Path]) -> tuple[str, str]:
    """``run:N`` as (the checkpoint's spec, the name the page shows); another spec as itself.
    Raises ValueError for a run the server does not follow or one with no best network."""
    spec = spec.strip()
    if not spec.startswith(RUN_SPEC):
        return spec, spec
    index = spec.removeprefix(RUN_SPEC)
    if not index.isdigit() or int(index) >= len(runs):
        raise ValueError(f"no run {index[:20]!r}: this server follows {len(runs)} run(s)")
    run = Path(runs[int(index)])
    best = run_best(run)
    if best is None:
        raise ValueError(f"run {run.name} has no models/best.pt yet")
    return f"model:{best}", f"best of {run.name}"


class YatzyWebGame:
    """One game: the person on seat ``human``, ``agent`` on the other, the oracle as judge.

    Not thread-safe by itself: :attr:`lock` serialises the calls the app makes on one game.
    """

    def __init__(self, agent, agent_name: str, seed: int, human: int, oracle=None) -> None:
        if human not in (0, 1):
            raise ValueError(f"seat must be 0 or 1, got {human}")
        self.agent, self.agent_name, self.seed, self.human = agent, agent_name, seed, human
        self.state = np.zeros(STATE_LEN, np.int64)
        new_match(self.state, seed, DICE_KEYED)
        self.filled: list[dict[int, int]] = [{}, {}]
        self.log: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self._values_of = None
        if oracle is not None:
            from leaguezero.yatzy.agents.oracle import OracleAgent

            self._values_of = OracleAgent(oracle=oracle).action_values

    # ------------------------------------------------------------------ view
    def _dice(self) -> list[int]:
        return [int(v) for v in DICE[int(self.state[S_DICE])]]

    def view(self) -> dict[str, Any]:
        """A JSON-able picture of the table: both cards, dice, whose turn, the log, the result."""
        s, human = self.state, self.human
        over = bool(is_terminal(s))
        your_turn = not over and int(s[S_PLAYER]) == human
        seats = {"you": human, "agent": 1 - human}
        cards = []
        for cat, name in enumerate(CATEGORIES):
            row: dict[str, Any] = {"cat": cat, "name": name, "label": BOX_WORDS[name]}
            for who, seat in seats.items():
                is_open = bool((int(s[S_AVAIL + seat]) >> (14 - cat)) & 1)
                row[who] = None if is_open else self.filled[seat].get(cat)
            open_for_you = row["you"] is None
            row["now"] = int(SCORES[int(s[S_DICE]), cat]) if your_turn and open_for_you else None
            cards.append(row)
        totals = {who: self._totals(seat) for who, seat in seats.items()}
        result = None
        if over:
            mine, theirs = totals["you"]["score"], totals["agent"]["score"]
            result = "you win" if mine > theirs else "you lose" if mine < theirs else "a draw"
        return {
            "agent": self.agent_name,
            "seat": human,
            "seed": self.seed,
            "cards": cards,
            "totals": totals,
            "dice": self._dice(),
            "rerolls": int(s[S_REROLLS]),
            "to_move": None if over else ("you" if your_turn else "agent"),
            "over": over,
            "result": result,
            "judge": self._values_of is not None,
            "log": self.log[-MAX_LOG:],
        }

    def _totals(self, seat: int) -> dict[str, Any]:
        """The upper boxes' sum (not clamped at 63 as in the state), the bonus (None while it
        is still open, 0 once it cannot be earned) and the score."""
        upper = upper_total(self.state, seat, self.filled)
        uppers_left = any(
            (int(self.state[S_AVAIL + seat]) >> (14 - cat)) & 1 for cat in range(NUM_UPPER)
        )
        bonus = UPPER_BONUS if upper >= UPPER_BONUS_THRESHOLD else None if uppers_left else 0
        return {"upper": upper, "bonus": bonus, "score": int(self.state[S_SCORE + seat])}

    def _say(self, who: str, text: str) -> None:
        self.log.append({"who": who, "text": in_words(text)})

    # ----------------------------------------------------------------- moves
    def _expect(self, mover: str) -> None:
        if is_terminal(self.state):
            raise MoveError("the game is over")
        if (int(self.state[S_PLAYER]) == self.human) != (mover == "you"):
            raise MoveError("it is not your turn" if mover == "you" else "it is your turn")

    def human_action(self, keep: list[int] | None = None, mark: int | str | None = None) -> int:
        """The action index for keeping the dice at sorted positions ``keep`` or marking box
        ``mark`` (index or name); raises :class:`MoveError` when it names no legal move."""
        if (keep is None) == (mark is None):
            raise MoveError("send either keep (dice positions 0..4) or mark (a box)")
        if mark is not None:
            if isinstance(mark, str) and mark in CATEGORIES:
                mark = CATEGORIES.index(mark)
            if not isinstance(mark, int) or not 0 <= mark < len(CATEGORIES):
                raise MoveError(f"unknown box {mark!r}: one of {', '.join(CATEGORIES)}")
            return MARK_OFFSET + mark
        if len(set(keep)) != len(keep) or any(not 0 <= i < 5 for i in keep):
            raise MoveError("keep lists distinct dice positions 0..4")
        action = 0
        for i in keep:
            action |= keep_bit(i)
        return action

    def play(self, keep: list[int] | None = None, mark: int | str | None = None) -> str | None:
        """Make the person's move; returns the oracle's judgment of it (None without oracle).

        Raises :class:`MoveError` for a move that is not legal now.
        """
        self._expect("you")
        action = self.human_action(keep, mark)
        dice = self._dice()
        if action == KEEP_ALL and int(self.state[S_REROLLS]) > 0:
            raise MoveError("keeping all five dice wastes a reroll (illegal): mark a box instead")
        if action < MARK_OFFSET and int(self.state[S_REROLLS]) == 0:
            raise MoveError("no rerolls left: mark a box")
        if not is_legal(self.state, action):
            raise MoveError(f"{move_text(action, dice)} is not legal now (that box is filled?)")
        verdict = None
        if self._values_of is not None:
            values = self._values_of(self.state[None, :])[0]
            verdict = in_words(oracle_verdict(values, action, dice))
        rerolls = int(self.state[S_REROLLS])
        points = play_move(self.state, action, self.filled)
        self._say("you", describe_move(action, dice, rerolls, points))
        if verdict is not None:
            self._say("oracle", verdict)
        return verdict

    def agent_step(self) -> str:
        """Let the agent make one move (one keep or one mark); returns what it did."""
        self._expect("agent")
        action = int(self.agent.act(self.state[None, :], np.array([0]))[0])
        dice, rerolls = self._dice(), int(self.state[S_REROLLS])
        points = play_move(self.state, action, self.filled)
        text = describe_move(action, dice, rerolls, points)
        self._say("agent", text)
        return text

    def hint(self) -> str:
        """The oracle's best options now, with your expected final score for each."""
        self._expect("you")
        if self._values_of is None:
            raise MoveError("no oracle loaded for this game (start one with the judge on)")
        values = self._values_of(self.state[None, :])[0]
        return in_words(oracle_hint(values, self._dice(), int(self.state[S_SCORE + self.human])))


def new_game(
    agent: str,
    seed: int,
    seat: int,
    judge: bool,
    sims: int = 64,
    oracle_table: Path | None = None,
    name: str | None = None,
) -> YatzyWebGame:
    """Start a game against ``agent`` (a spec), shown as ``name`` (the spec as typed by
    default); ``judge`` loads the oracle (first build ~20 s).

    Raises ValueError with a one-line reason for an agent that cannot be built or a bad seat.
    """
    opponent = make_opponent(agent, seed, sims)
    oracle = None
    if judge:
        from leaguezero.yatzy.oracle.solver import load_oracle

        oracle = load_oracle(oracle_table)
    return YatzyWebGame(opponent, name or agent.strip(), seed, seat, oracle)


_report_lock = threading.Lock()


def run_report(run: Path) -> Path:
    """A yz run's ``report.html`` (``leaguezero report``), rebuilt when its stats are newer.

    Raises FileNotFoundError when ``run`` is not a yz run.
    """
    from leaguezero.yatzy.train.report import build_report

    stats = run / "logs" / "iteration_stats.ndjson"
    report = run / "report.html"
    with _report_lock:  # one build at a time: matplotlib's pyplot is not thread-safe
        if not report.exists() or (
            stats.exists() and report.stat().st_mtime < stats.stat().st_mtime
        ):
            return build_report(run)
    return report
