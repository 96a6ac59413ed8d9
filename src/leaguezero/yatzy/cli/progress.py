"""What ``yz run`` shows while it works: per-phase progress with rate and ETA, a run-level ETA,
the expected duration up front, and one plain-language summary line per iteration.

The loop reports ``report(phase, advance, total)``: ``total`` (when non-zero) sets the phase's
size and never resets what is done (self-play passes it with every finished game), ``advance``
adds finished units. On a terminal the phases are rich progress bars; otherwise (a log file, CI,
a pipe) one plain line is printed at each tenth of a phase, so the output still advances.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from leaguezero.common.progress import duration

UNITS = {"selfplay": "games", "train": "steps", "gate": "games", "eval": "games"}
LABELS = {"selfplay": "self-play", "train": "training", "gate": "gating", "eval": "evaluation"}

# Calibration on the 2-core development machine: the default config's 60-minute run in
# docs/guides/alphazero.md did 52 iterations (~69 s each, about one core per run), i.e. ~60k search
# simulations/s per worker all phases included; a new user on a busy 2-core machine saw 3-4.5
# minutes per iteration. The estimate scales these by the config's work per iteration.
IDLE_SIMS_PER_S = 60_000.0
IDLE_TRAIN_SAMPLES_PER_S = 40_000.0
BUSY_SLOWDOWN = 3.0
# The turn search (search.kind: turn) counts successor evaluations as its "sims": ~1,900 per
# 2-player game (measured over the default run's 1,024-game iterations); self-play evaluates
# them in bfloat16 at ~250k/s on one idle core (175k/s measured under load 3-4), gating and
# evaluation in float32 at ~100k/s.
TURN_EVALS_PER_GAME = 1_900.0
IDLE_TURN_EVALS_PER_S = 250_000.0
IDLE_TURN_EVAL_FP32_PER_S = 100_000.0
IDLE_TURN_TRAIN_SAMPLES_PER_S = 60_000.0  # value heads only (41k/s measured under load 3-4)
TURNS_PER_GAME = 2 * 15  # two players, fifteen categories each
REROLL_DECISIONS_PER_TURN = 1.4  # measured: 65 decisions per 2-player game (early marks)


def sims_per_game(cfg) -> float:
    """Simulations one self-play game needs, from the search budgets (each turn: ~1.4 reroll
    decisions at ``budget_reroll`` and one mark at ``budget_mark``); for the turn search, its
    successor evaluations."""
    from leaguezero.yatzy.train.kinds import search_kind

    if not search_kind(cfg.search.kind).budgeted:  # the turn search
        return TURN_EVALS_PER_GAME
    reroll = REROLL_DECISIONS_PER_TURN * cfg.mcts.budget_reroll
    return TURNS_PER_GAME * (reroll + cfg.mcts.budget_mark)


def expected_iteration_seconds(cfg) -> tuple[float, float]:
    """(idle, busy) seconds one iteration of ``cfg`` should take on this kind of machine.

    It grows with ``selfplay.games_per_iteration`` x the search budgets (``mcts.budget_*``),
    the network size (the rates are for the default 256 x 2 YatzyNet), ``train.steps`` x
    ``train.batch_size``, the gating and evaluation games at their ``sims``, and shrinks with
    ``selfplay.workers`` up to the number of free cores.
    """
    from leaguezero.yatzy.train.kinds import search_kind

    width = (cfg.model.hidden / 256) ** 2 * max(cfg.model.blocks, 1) / 2  # forward cost vs default
    if not search_kind(cfg.search.kind).budgeted:  # the turn search
        width = (cfg.model.hidden / 256) ** 2  # the board towers' cost does not depend on blocks
        return _turn_iteration_seconds(cfg, max(width, 0.25))
    rate = IDLE_SIMS_PER_S / max(width, 0.25) * max(1, cfg.selfplay.workers)
    selfplay = cfg.selfplay.games_per_iteration * sims_per_game(cfg)
    decisions = TURNS_PER_GAME * (REROLL_DECISIONS_PER_TURN + 1)  # per 2-player game
    gate_games = (cfg.gate.min_games + cfg.gate.max_games) / 2  # the sequential test may stop
    gate = gate_games * decisions * max(cfg.gate.sims, 1)
    # Evaluation: solitaire boards and matches, where only the candidate searches (half a game).
    games = 2 * cfg.oracle_eval.games + 2 * cfg.oracle_eval.match_games
    evaluation = games * decisions / 2 * max(cfg.oracle_eval.sims, 1)
    train = cfg.train.steps * cfg.train.batch_size / (IDLE_TRAIN_SAMPLES_PER_S / max(width, 0.25))
    idle = (selfplay + gate + evaluation) / rate + train + 5.0  # + start-up of each phase
    return idle, idle * BUSY_SLOWDOWN


def _turn_iteration_seconds(cfg, width: float) -> tuple[float, float]:
    """:func:`expected_iteration_seconds` for the turn search (one evaluation per turn)."""
    workers = max(1, cfg.selfplay.workers)
    selfplay = cfg.selfplay.games_per_iteration * TURN_EVALS_PER_GAME
    selfplay_s = selfplay * width / (IDLE_TURN_EVALS_PER_S * workers)
    if cfg.gate.continuous:  # one regression check every check_every iterations
        gate_games = cfg.gate.check_games / cfg.gate.check_every
    else:  # the sequential test may stop between min_games and max_games
        gate_games = (cfg.gate.min_games + cfg.gate.max_games) / 2
    eval_games = 2 * cfg.oracle_eval.games + cfg.oracle_eval.match_games  # matches: half a game
    judge_s = (gate_games + eval_games) * TURN_EVALS_PER_GAME * width / IDLE_TURN_EVAL_FP32_PER_S
    train = cfg.train.steps * cfg.train.batch_size * width / IDLE_TURN_TRAIN_SAMPLES_PER_S
    idle = selfplay_s + judge_s + train + 5.0
    return idle, idle * BUSY_SLOWDOWN


def expected_duration_line(cfg, iterations: int) -> str:
    """One line for the start of ``yz run``: the expected time per iteration and for the run."""
    idle, busy = expected_iteration_seconds(cfg)
    return (
        f"expected: {duration(idle)}-{duration(busy)} per iteration, "
        f"{duration(idle * iterations)}-{duration(busy * iterations)} for {iterations} "
        f"(idle vs busy 2-core machine; scales with games x search budget and net size; "
        f"the ETA below updates as iterations finish)"
    )


@dataclass
class _Phase:
    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    next_line: int = 0  # plain mode: print when ``done`` reaches this...
    finished_line: bool = False  # ...and once when it reaches ``total``


class RunProgress:
    """Phase bars (terminal) or milestone lines (elsewhere) plus the run's ETA; see module doc.

    Args:
        iterations: how many iterations this invocation runs (for the run ETA).
        per_iteration_s: the expected seconds per iteration until one has been measured.
        terminal: draw rich bars on stderr; otherwise write plain lines to ``stream``.
        stream: where plain lines go (stderr).
        sims_per_game: simulations per self-play game, for the live sims/s estimate.
    """

    def __init__(
        self,
        iterations: int,
        per_iteration_s: float,
        *,
        terminal: bool,
        stream: IO[str],
        sims_per_game: float | None = None,
    ) -> None:
        self.iterations = iterations
        self.per_iteration_s = per_iteration_s
        self.terminal = terminal
        self.stream = stream
        self.sims_per_game = sims_per_game
        self.finished = 0
        self.measured: list[float] = []
        self.iteration = 0
        self.iteration_started = time.monotonic()
        self.phases: dict[str, _Phase] = {}
        self._rich = None
        self._tasks: dict[str, int] = {}
        self._run_task: int | None = None

    # ------------------------------------------------------------------ run level
    def run_eta_s(self) -> float:
        """Seconds left for the run: the mean of the measured iterations (else the estimate) x
        left. This process's first iteration is never measured for it: it also compiles the
        numba kernels of the first self-play, so it runs up to twice as long."""
        steady = self.measured[1:]
        per = sum(steady) / len(steady) if steady else self.per_iteration_s
        elapsed = time.monotonic() - self.iteration_started
        return max(0.0, per - elapsed) + per * max(0, self.iterations - self.finished - 1)

    def start_iteration(self, iteration: int, last: int) -> None:
        self.iteration, self.last = iteration, last
        self.iteration_started = time.monotonic()
        self.phases = {}
        if self._rich is not None:
            for task in self._tasks.values():
                self._rich.remove_task(task)
            self._tasks = {}
            self._update_run_task()
        else:
            self._line(
                f"iteration {iteration}/{last} started; run ETA ~{duration(self.run_eta_s())}"
            )

    def end_iteration(self) -> float:
        """Mark the iteration done; returns its duration in seconds (this invocation's part)."""
        seconds = time.monotonic() - self.iteration_started
        self.measured.append(seconds)
        self.finished += 1
        if self._rich is not None:
            self._update_run_task()
        return seconds

    def _update_run_task(self) -> None:
        info = (
            f"iterations done (now {self.iteration}/{self.last}), ETA ~{duration(self.run_eta_s())}"
        )
        self._rich.update(self._run_task, info=info, completed=self.finished)

    # ------------------------------------------------------------------ phases
    def report(self, phase: str, advance: int, total: int) -> None:
        """The loop's reporter: see the module docstring for the meaning of the arguments."""
        state = self.phases.get(phase)
        if state is None:
            state = self.phases[phase] = _Phase()
        if total and total != state.total:
            state.total = total  # a size only; what is done stays done
        state.done += advance
        if self._rich is not None:
            self._rich_report(phase, state)
        else:
            self._plain_report(phase, state)

    def rate_text(self, phase: str, state: _Phase) -> str:
        elapsed = max(time.monotonic() - state.started, 1e-9)
        rate = state.done / elapsed
        unit = UNITS.get(phase, "items")
        text = f"{rate:,.1f} {unit}/s"
        if phase == "selfplay" and self.sims_per_game and state.done:
            text += f", ~{rate * self.sims_per_game:,.0f} sims/s"
        return text

    def phase_eta_s(self, state: _Phase) -> float | None:
        if not state.total or not state.done:
            return None
        elapsed = time.monotonic() - state.started
        return elapsed / state.done * max(0, state.total - state.done)

    def _plain_report(self, phase: str, state: _Phase) -> None:
        if not state.total or state.finished_line:
            return
        if state.done < state.next_line and state.done < state.total:
            return
        state.finished_line = state.done >= state.total
        step = max(1, math.ceil(state.total / 10))
        state.next_line = (state.done // step + 1) * step
        unit = UNITS.get(phase, "items")
        if state.done == 0:
            self._line(f"  {LABELS.get(phase, phase)}: {state.total} {unit} to go")
            return
        percent = 100 * min(state.done, state.total) // state.total
        eta = self.phase_eta_s(state)
        self._line(
            f"  {LABELS.get(phase, phase)} {state.done}/{state.total} {unit} ({percent}%), "
            f"{self.rate_text(phase, state)}, elapsed "
            f"{duration(time.monotonic() - state.started)}, ETA {duration(eta)}"
        )

    def _rich_report(self, phase: str, state: _Phase) -> None:
        task = self._tasks.get(phase)
        if task is None:
            task = self._tasks[phase] = self._rich.add_task(
                LABELS.get(phase, phase), total=None, info=""
            )
        info = ""
        if state.done:
            eta = self.phase_eta_s(state)
            info = f"{self.rate_text(phase, state)}, ETA {duration(eta)}"
        self._rich.update(task, total=state.total or None, completed=state.done, info=info)
        self._update_run_task()

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    # ------------------------------------------------------------------ lifetime
    @contextmanager
    def display(self) -> Iterator[RunProgress]:
        """Draw the bars (terminal) while the run works; plain mode needs no set-up."""
        if not self.terminal:
            yield self
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._rich = Progress(
            TextColumn("{task.description:>10}"), BarColumn(bar_width=20), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), console=Console(file=self.stream), transient=True,
        )  # fmt: skip
        self._run_task = self._rich.add_task("run", total=self.iterations, info="")
        try:
            with self._rich:
                yield self
        finally:
            self._rich = None

    def echo_above(self, text: str, out: Callable[[str], None]) -> None:
        """Print a summary line above the bars (or plainly)."""
        if self._rich is not None:
            self._rich.console.print(text, highlight=False, markup=False, soft_wrap=True)
        else:
            out(text)


def _pct(value: object) -> str:
    return f"{100 * value:.0f}%" if isinstance(value, int | float) and math.isfinite(value) else "-"


def _pct_se(match: dict) -> str:
    """``85% ± 4%``; ``0% ± ?`` where the SE is unknown or rounds to 0 (every game won or lost:
    no spread to estimate from, not a certain rate)."""
    se = match.get("a_win_rate_se")
    known = isinstance(se, int | float) and math.isfinite(se) and round(100 * se) > 0
    return f"{_pct(match.get('a_win_rate'))} ± {_pct(se) if known else '?'}"


def _num(value: object, fmt: str) -> str:
    ok = isinstance(value, int | float) and math.isfinite(value)
    return format(value, fmt) if ok else "-"


def _early(gate: dict, max_games: int | None) -> str:
    """``; the sequential test stopped after N of M games`` when it stopped gating early."""
    games = gate.get("games")
    if max_games is None or not isinstance(games, int) or games >= max_games:
        return ""
    return f"; the sequential test stopped after {games} of {max_games} games"


# train/evaluation/gate.py's reasons, as a reader of the summary line would put them
GATE_REASONS = {
    "sprt_h1": "significantly better",
    "sprt_h0": "significantly not better",
    "threshold": "undecided after the most games; judged by win rate",
    "guardrail": "blocked: its solitaire score dropped",
    "check_passed": "continuous promotion; the regression check passed",
    "rollback": "continuous promotion; the regression check found fewer points: rolled back "
    "to the anchor",
}


def loss_text(train: dict, *, trains_policy: bool) -> str:
    """The training losses that mean something for the search kind: PUCT's total (first ->
    last quarter of the steps, dominated by the policy head) with its heads; the turn search has
    no policy head, so its value and margin losses alone, with three significant digits (they
    are small, and rise when the targets move: new self-play data, not a broken trainer)."""
    value, margin = _num(train.get("loss_value"), ".3g"), _num(train.get("loss_margin"), ".3g")
    heads = f"value {value}, margin {margin}"
    if not trains_policy:
        return f"training loss {heads}"
    return (
        f"training loss {_num(train.get('first_loss_total'), '.2f')} -> "
        f"{_num(train.get('loss_total'), '.2f')} (policy {_num(train.get('loss_policy'), '.3g')}, "
        f"{heads})"
    )


def _check_rule(gt: dict, reason: str) -> str:
    """The rule the regression check applied, with its numbers (train/evaluation/gate.py's
    ``run_check``: roll back when the mean is below -2 standard errors)."""
    mean, se = gt.get("score_diff_mean"), gt.get("score_diff_se")
    limit = -2.0 * se if isinstance(se, int | float) and math.isfinite(se) else float("nan")
    rule = f"{_num(mean, '+.2f')} is {{}} the allowed drop of -2 SE = {_num(limit, '+.2f')}"
    return rule.format("below" if reason == "rollback" else "within")


def _gate_text(gt: dict, decision: str, reason, max_gate_games: int | None) -> str:
    if reason == "continuous":
        return "promoted without a gate (continuous promotion)"
    if reason in ("check_passed", "rollback"):
        return (
            f"regression check: {_num(gt.get('score_diff_mean'), '+.2f')} ± "
            f"{_num(gt.get('score_diff_se'), '.2f')} points a game against the anchor over "
            f"{_num(gt.get('games'), 'd')} games: {decision} ({GATE_REASONS[reason]}: "
            f"{_check_rule(gt, reason)})"
        )
    return (
        f"candidate won {_pct(gt.get('a_win_rate'))} ± {_pct(gt.get('a_win_rate_se'))} of "
        f"{_num(gt.get('games'), 'd')} games against the best: {decision} "
        f"({GATE_REASONS.get(str(reason), str(reason))}{_early(gt, max_gate_games)})"
    )


def summary_text(
    record: dict,
    *,
    last: int,
    seconds: float,
    games: int | None,
    resumed: bool,
    trains_policy: bool = True,
    max_gate_games: int | None = None,
) -> str:
    """The per-iteration line in plain words (all numbers stay in iteration_stats.ndjson).

    ``record`` is what ``loop.run_iteration`` returns; ``games`` the self-play games of the
    iteration on disk (a resumed iteration played only part of them in this process);
    ``trains_policy`` whether the search kind trains a policy head (:func:`loss_text`);
    ``max_gate_games`` ``gate.max_games``, to say when the sequential test stopped early.
    """
    sp, tr, gt = record.get("selfplay", {}), record.get("train", {}), record.get("gate", {})
    ev = record.get("eval", {})
    games = games if games is not None else sp.get("games")
    took = f"{duration(seconds)}{' since resume' if resumed else ''}"
    decision = "new best model" if record.get("promoted") else "kept the previous best"
    reason = record.get("promotion_reason")
    parts = [
        f"iteration {record['iteration']}/{last} took {took}",
        f"self-play {_num(games, 'd')} games at {_num(sp.get('sims_per_s'), ',.0f')} sims/s",
        loss_text(tr, trains_policy=trains_policy),
        _gate_text(gt, decision, reason, max_gate_games),
    ]
    if "candidate" in ev:
        cand = ev["candidate"]
        parts.append(
            f"candidate scores {_num(cand.get('mean'), '.1f')} ± {_num(cand.get('se'), '.1f')} "
            f"alone on {_num(cand.get('boards'), 'd')} boards (perfect play 248.4)"
        )
    if "vs_greedy" in ev:
        greedy, perfect = ev["vs_greedy"], ev.get("vs_oracle", {})
        parts.append(
            f"beats the greedy bot {_pct_se(greedy)}, the perfect player {_pct_se(perfect)} of "
            f"{_num(greedy.get('games'), 'd')} games"
        )
    return " | ".join(parts)
