"""``yz oracle``: the exact solitaire oracle (yatzy-solver) from the command line.

Contracts (docs/reference/oracle.md): ``expected`` prints the number on its first line; ``query``
reads
JSON lines ``{"avail_mask","upper_total","dice","rerolls_left"}`` and answers one JSON line each.
Heavy imports happen inside commands so that ``yz --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail

oracle_app = typer.Typer(
    help="The exact solitaire oracle: expected score, simulation, queries, regret.",
    no_args_is_help=True,
)

TableOpt = Annotated[
    Path | None,
    typer.Option(
        "--oracle-table",
        help="Solver table file (default: built once into the user cache dir, about 20 s).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _load(table: Path | None):
    """Load the oracle; a first build shows a spinner on stderr, errors are one line."""
    from rich.console import Console

    from leaguezero.yatzy.oracle.solver import OracleError, default_table_path, load_oracle

    if table is not None and table.is_dir():
        raise fail(f"--oracle-table {table} is a folder; give a file path")
    target = table if table is not None else default_table_path()
    try:
        if target.is_file():
            return load_oracle(table)
        message = f"building the oracle table once (about 20 s) into {target}"
        console = Console(stderr=True)
        if not console.is_terminal:  # a spinner draws nothing in a log or pipe: say it once
            typer.echo(message, err=True)
            return load_oracle(table, progress=lambda _msg: None)
        with console.status(message):
            return load_oracle(table, progress=lambda _msg: None)
    except OracleError as err:
        raise fail(str(err)) from None


@oracle_app.command("expected")
def expected(table: TableOpt = None) -> None:
    """The optimal expected solitaire score from an empty board (first line: the number)."""
    import yatzy_solver as ys

    from leaguezero.yatzy.oracle.solver import VARIANT_ID

    oracle = _load(table)
    typer.echo(f"{oracle.expected_score:.7f}")
    typer.echo(f"optimal expected score, {VARIANT_ID} (yatzy-solver {ys.SOLVER_VERSION})")


def _histogram(scores, width: int = 50, bin_size: int = 10) -> list[str]:
    import numpy as np

    lo = int(scores.min()) // bin_size * bin_size
    hi = int(scores.max()) // bin_size * bin_size + bin_size
    counts, edges = np.histogram(scores, bins=np.arange(lo, hi + 1, bin_size))
    top = max(int(counts.max()), 1)
    lines = []
    for c, left in zip(counts, edges[:-1], strict=True):
        bar = "█" * round(width * int(c) / top)
        lines.append(f"{int(left):4d}-{int(left) + bin_size - 1:<4d} {bar} {int(c)}")
    return lines


@oracle_app.command("sim")
def sim(
    games: Annotated[int, typer.Option(help="Number of solitaire games.", min=1)] = 10_000,
    seed: Annotated[int, typer.Option(help="Seed; game i depends only on it.", min=0)] = 0,
    threads: Annotated[
        int | None, typer.Option(help="numba threads (default: numba's setting).", min=1)
    ] = None,
    json_out: JsonOpt = False,
    table: TableOpt = None,
) -> None:
    """Play optimal solitaire games: mean, std, median, bonus rate, Yatzy rate, histogram."""
    import numba

    from leaguezero.yatzy.agents.oracle import simulate

    oracle = _load(table)
    if threads is not None:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    start = time.perf_counter()
    stats = simulate(oracle, games, seed)
    seconds = time.perf_counter() - start
    record = {**stats.to_dict(), "expected": oracle.expected_score, "seconds": seconds}
    if json_out:
        typer.echo(json.dumps(record))
        return
    typer.echo(
        f"{games} optimal solitaire games, seed {seed} ({games / seconds:,.0f} games/s)\n"
        f"  mean        {stats.mean:.3f} ± {stats.se:.3f} (expected {oracle.expected_score:.3f})\n"
        f"  std         {stats.std:.3f}\n"
        f"  median      {stats.median:.1f}   (min {stats.min}, max {stats.max})\n"
        f"  bonus rate  {stats.bonus_rate:.4f}\n"
        f"  yatzy rate  {stats.yatzy_rate:.4f}"
    )
    for line in _histogram(stats.scores):
        typer.echo("  " + line)


def answer_query(oracle, request: dict) -> dict:
    """One ``yz oracle query`` answer (see docs/reference/oracle.md); raises OracleError if
    malformed."""
    import numpy as np

    from leaguezero.yatzy.game.rules import S_AVAIL, S_DICE, S_REROLLS, S_UPPER, STATE_LEN
    from leaguezero.yatzy.game.tables import KEEP_ALL, MARK_OFFSET, action_label, dice_index
    from leaguezero.yatzy.oracle.dp import choose
    from leaguezero.yatzy.oracle.solver import OracleError, check_board

    if not isinstance(request, dict):
        raise OracleError("each line must be a JSON object")
    missing = [k for k in ("avail_mask", "upper_total", "dice", "rerolls_left") if k not in request]
    if missing:
        raise OracleError(f"missing field(s): {', '.join(missing)}")
    avail, upper, rerolls = (request[k] for k in ("avail_mask", "upper_total", "rerolls_left"))
    if not all(isinstance(v, int) for v in (avail, upper, rerolls)):
        raise OracleError("avail_mask, upper_total and rerolls_left must be integers")
    check_board(avail, upper)
    if avail == 0:
        raise OracleError("avail_mask is 0: every category is filled, there is nothing to decide")
    if rerolls not in (0, 1, 2):
        raise OracleError(f"rerolls_left must be 0, 1 or 2, got {rerolls}")
    try:
        dice = dice_index(request["dice"])
    except (TypeError, ValueError) as err:
        raise OracleError(f"dice: {err}") from None
    state = np.zeros((1, STATE_LEN), dtype=np.int64)
    state[0, S_AVAIL], state[0, S_UPPER] = avail, upper
    state[0, S_DICE], state[0, S_REROLLS] = dice, rerolls
    values = oracle.option_values(state)[0]  # the solver's own values, float64 [47]
    best = int(choose(values))
    action = (
        {"kind": "mark", "cat": best - MARK_OFFSET}
        if best >= MARK_OFFSET
        else {"kind": "keep", "mask": best}
    )
    legal = [a for a in range(len(values)) if not np.isnan(values[a]) and a != KEEP_ALL]
    return {
        "action": action,
        "value": float(values[best]),
        "values": {action_label(a): float(values[a]) for a in legal},
        "dice": sorted(int(v) for v in request["dice"]),
    }


@oracle_app.command("query")
def query(table: TableOpt = None) -> None:
    """JSON lines on stdin -> one JSON line each: best action, its value, every action's value.

    A malformed line is answered with {"error": "..."} and the exit code is 1 at the end.
    """
    from leaguezero.yatzy.oracle.solver import OracleError

    oracle = _load(table)
    errors = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = answer_query(oracle, json.loads(line))
        except json.JSONDecodeError as err:
            answer, errors = {"error": f"not JSON: {err}"}, errors + 1
        except OracleError as err:
            answer, errors = {"error": str(err)}, errors + 1
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()  # answer each line at once: callers may talk line by line
    if errors:
        raise typer.Exit(1)


@oracle_app.command("regret")
def regret(
    game_file: Annotated[
        Path, typer.Argument(help="Recorded game JSON (docs/reference/oracle.md).")
    ],
    json_out: JsonOpt = False,
    table: TableOpt = None,
) -> None:
    """Per-decision regret of a recorded 2-player game against optimal solitaire play."""
    from leaguezero.yatzy.game.rules import S_DICE
    from leaguezero.yatzy.game.tables import DICE, action_label
    from leaguezero.yatzy.oracle.diagnostics import (
        diagnose_game,
        load_game,
        select_decisions,
        summarize,
    )
    from leaguezero.yatzy.oracle.solver import OracleError

    try:
        game = load_game(game_file)
        oracle = _load(table)
        states, diag = diagnose_game(oracle, game)
    except OracleError as err:
        raise fail(str(err)) from None
    players = game.players or ["seat 0", "seat 1"]
    seats = {
        players[seat]: summarize(select_decisions(diag, diag.player == seat), 1) for seat in (0, 1)
    }
    if json_out:
        decisions = [
            {
                "player": int(diag.player[i]),
                "dice": DICE[states[i, S_DICE]].tolist(),
                "rerolls_left": int(diag.rerolls_left[i]),
                "action": int(game.actions[i]),
                "best_action": int(diag.best_action[i]),
                "regret": float(diag.regret[i]),
            }
            for i in range(len(game.actions))
        ]
        typer.echo(json.dumps({"seats": seats, "decisions": decisions}))
        return
    typer.echo(" #  seat  dice        rr  action                    oracle                  regret")
    for i, a in enumerate(game.actions):
        dice = DICE[states[i, S_DICE]]
        mark = "" if diag.matches[i] else " *"
        typer.echo(
            f"{i:2d}  {diag.player[i]:4d}  {''.join(map(str, dice)):10s}  {diag.rerolls_left[i]}"
            f"  {action_label(int(a), dice):24s}"
            f"  {action_label(int(diag.best_action[i]), dice):22s}"
            f"  {diag.regret[i]:6.2f}{mark}"
        )
    for name, s in seats.items():
        typer.echo(
            f"{name}: {s['decisions']} decisions, match rate {s['oracle_match_rate']:.3f}, "
            f"regret {s['mean_regret_per_game']:.2f} points"
        )
