"""The Diplomacy commands' tables (``eval``, ``bench``): rich on a terminal, plain fixed-width
text elsewhere.

Off a terminal rich assumes 80 columns and folds a wide table's cells over several lines, so
a table sent to a file, a pipe or CI came out as fragments ("0.464 ±" on one line, "0.188" on
the next). Plain text keeps one row a line at whatever width it needs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

import typer


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    left: Sequence[str] = (),
    styles: Sequence[str | None] | None = None,
    stream: IO[str] | None = None,
    terminal: bool | None = None,
) -> None:
    """Print ``rows`` under ``columns`` with ``title`` above them.

    ``left``: the columns justified left (the others right); ``styles``: a rich style for each
    row's last cell (e.g. ``"red"`` for a failed verdict), used on a terminal only; ``stream``
    (default stdout) and ``terminal`` (default: whether the stream is one) are for tests.
    """
    stream = stream if stream is not None else sys.stdout
    terminal = stream.isatty() if terminal is None else terminal
    if terminal:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for column in columns:
            table.add_column(column, justify="left" if column in left else "right")
        for i, row in enumerate(rows):
            style = styles[i] if styles is not None else None
            cells = list(row)
            if style:
                cells[-1] = f"[{style}]{cells[-1]}"
            table.add_row(*cells)
        Console(file=stream).print(table)
        return
    widths = [max(len(col), *(len(row[i]) for row in rows)) for i, col in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(width) if col in left else cell.rjust(width)
            for cell, width, col in zip(cells, widths, columns, strict=True)
        ]
        return "  ".join(parts).rstrip()

    stream.write(title + "\n" + line(columns) + "\n")
    for row in rows:
        stream.write(line(row) + "\n")
    stream.flush()


def print_eval_report(report: dict) -> None:
    """``diplomacy eval``'s table: every rate and score with its SE, and what each column is."""
    columns = (
        "agent",
        "seats",
        "win rate ± SE",
        "mean score ± SE",
        "mean SoS ± SE",
        "Elo",
        "change",
    )
    rows = []
    agents = [("hero " + report["hero"]["agent"], report["hero"]), *report["opponents"].items()]
    for name, entry in agents:
        rows.append(
            (
                name,
                str(entry["seats"]),
                _rate_cell(entry),
                f"{entry['mean_score']:.2f} ± {_se(entry.get('mean_score_se'), 2)}",
                f"{entry['mean_sos']:.3f} ± {_se(entry.get('mean_sos_se'), 3)}",
                f"{entry['rating_after']:.1f}",
                f"{entry['rating_change']:+.1f}",
            )
        )
    print_table(f"{report['games']} games, seed {report['seed']}", columns, rows, left=("agent",))
    start = report["hero"]["rating_before"]
    typer.echo(f"win: {report['win_definition']}")
    typer.echo(
        "SE: over games (an agent's seats in one game are not independent); score: centres + "
        "0.5 a unit + the leader's bonus; SoS: sum-of-squares, centres² / the sum over powers "
        f"of centres²; Elo: from these games only, every agent from {start:.0f} "
        "(initial_rating), not the league's configured league.*_elo"
    )


def _rate_cell(entry: dict) -> str:
    """``0.357 ± 0.128``; ``0.000 (0/84)`` where every seat lost or won (an SE of 0 says
    nothing about the spread), ``?`` for the SE of a single game."""
    rate, se = entry["win_rate"], entry.get("win_rate_se")
    if se == 0:
        return f"{rate:.3f} ({entry['wins']:g}/{entry['seats']})"
    return f"{rate:.3f} ± {_se(se, 3)}"


def _se(value: float | None, digits: int) -> str:
    """A standard error for a table cell; ``?`` with a single game (no spread known)."""
    return "?" if value is None else f"{value:.{digits}f}"


def print_bench_report(report: dict, max_years: int) -> None:
    """``diplomacy bench``'s table: a 95% interval and a verdict per row, the rule stated."""
    columns = ("opponent", "tier", "win rate ± SE", "95% interval", "score", "centres", "alive",
               "floor", "verdict")  # fmt: skip
    rows, styles = [], []
    for row in report["rows"]:
        # A binomial SE of 0 (every game won or lost) says nothing about the spread.
        win = f"{row['win_rate']:.3f}"
        wins = round(row["win_rate"] * row["games"])
        win += f" ± {row['win_se']:.3f}" if row["win_se"] > 0 else f" ({wins}/{row['games']})"
        rows.append(
            (
                row["agent"],
                row["tier"],
                win,
                f"{row['win_low']:.3f}-{row['win_high']:.3f}",
                f"{row['mean_score']:.2f}",
                f"{row['mean_centers']:.2f}",
                f"{row['survival']:.2f}",
                f"{row['floor']:.3f}",
                {"pass": "pass", "fail": "FAIL"}.get(row["verdict"], row["verdict"]),
            )
        )
        styles.append({"pass": "green", "fail": "red"}.get(row["verdict"], "yellow"))
    title = (
        f"{report['hero']}: {report['games_per_opponent']} games per opponent, "
        f"{max_years}-year games"
    )
    print_table(title, columns, rows, left=("opponent", "tier", "verdict"), styles=styles)
    verdict = {
        "pass": "passes every floor",
        "fail": "misses at least one floor",
        "inconclusive": "is inconclusive on at least one floor (its interval straddles it: more "
        "--games would decide) and misses none",
    }[report["verdict"]]
    typer.echo(
        f"{report['hero']} {verdict}; a verdict needs the 95% interval wholly above (pass) or "
        f"below (FAIL) the floor; parity = 1/7 = {report['parity']:.3f}; games seeded by "
        f"run.seed {report['seed']} (--seed for others)"
    )
