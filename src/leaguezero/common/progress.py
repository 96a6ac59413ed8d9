"""Progress of a long command that finishes units one by one (games, steps), on stderr.

On a terminal a transient rich bar; anywhere else (a log file, CI, a pipe, a job under
``nohup``) plain lines: the first unit, then at most one line every ``every_s`` seconds and
the last one, each with the count, the rate and the time left. So a run that is stopped by a
timeout still shows how far it got, and stdout stays free for ``--json``.
"""

from __future__ import annotations

import math
import sys
import time
from types import TracebackType
from typing import IO


def duration(seconds: float | None) -> str:
    """``95`` -> ``1m35s``; ``4000`` -> ``1h06m``; None -> ``-``."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class UnitProgress:
    """``with UnitProgress("eval hero vs dumb_bot", total=140, unit="games") as p: p.advance()``.

    ``stream``: where lines go (stderr); ``terminal``: draw a rich bar (default: whether the
    stream is a terminal); ``every_s``: the plain lines' spacing; ``clock``: for tests.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        unit: str = "games",
        stream: IO[str] | None = None,
        terminal: bool | None = None,
        every_s: float = 5.0,
        clock=time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.every_s = every_s
        self.clock = clock
        self.done = 0
        self._started = clock()
        self._last_line: float | None = None
        self._bar = None
        self._task = None

    def __enter__(self) -> UnitProgress:
        self._started = self.clock()
        if self.terminal:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more units are done; ``note``: a few words about the last one (plain lines)."""
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n, description=f"{self.label} {note}".strip())
            return
        now = self.clock()
        due = self._last_line is None or now - self._last_line >= self.every_s
        if due or self.done >= self.total:
            self._last_line = now
            self.stream.write(self.line(now, note) + "\n")
            self.stream.flush()

    def line(self, now: float, note: str = "") -> str:
        """``eval X: 3/140 games, 41.0 s/game, elapsed 2m03s, left ~1h33m (note)``."""
        elapsed = now - self._started
        per_unit = elapsed / max(self.done, 1)
        left = per_unit * max(self.total - self.done, 0)
        unit = self.unit[:-1] if self.unit.endswith("s") else self.unit
        text = (
            f"{self.label}: {self.done}/{self.total} {self.unit}, {per_unit:.1f} s/{unit}, "
            f"elapsed {duration(elapsed)}, left ~{duration(left)}"
        )
        return f"{text} ({note})" if note else text
