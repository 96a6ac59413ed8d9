"""``--results FILE`` of ``diplomacy eval`` and ``bench``: each finished game appended as one
JSON line when it ends, so a run cut short keeps its games.

The file is opened before the first game (:func:`~leaguezero.common.safe_files.open_append`):
a symbolic link (one planted in a shared sticky folder would send the lines into its target),
a FIFO (which blocked the command silently forever) or a device such as ``/dev/full`` is
refused in one line before any game is played. A write that fails later (a full disk) costs no
game: the command plays on, prints its report, then the lines the file did not take on stderr
and one line saying so, and exits with status 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from leaguezero.common.cli import fail
from leaguezero.common.safe_files import UnsafeFileError, open_append, write_all


class GameResults:
    """The ``--results`` file of one command (a no-op without a path); see the module doc.

    Use as ``with GameResults(path) as log: ... log.write(game)``, then ``log.finish()`` after
    the report is printed.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fd = -1
        self._written = 0
        self._unsaved: list[str] = []  # lines the file did not take, in game order
        self._error: str | None = None
        self._shown = False  # the unsaved lines are on stderr already (a run cut short)

    def __enter__(self) -> GameResults:
        if self.path is not None:
            self._fd = _open_or_fail("--results", self.path)
        return self

    def write(self, game, **extra) -> None:
        """Append ``game``'s summary (with ``extra`` fields first) as one line."""
        if self.path is None:
            return
        from leaguezero.diplomacy.game.tournament import game_summary

        line = json.dumps({**extra, **game_summary(game)}) + "\n"
        if self._error is None:
            try:
                write_all(self._fd, line.encode("utf-8"))
                self._written += 1
                return
            except OSError as err:
                self._error = err.strerror or str(err)
                print(
                    f"warning: --results {self.path}: {self._error}; the games go on and the "
                    "lines not written are printed on stderr at the end",
                    file=sys.stderr,
                    flush=True,
                )
        self._unsaved.append(line)

    def __exit__(self, *exc) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        if exc[0] is not None and self._unsaved:  # cut short: keep the games all the same
            sys.stderr.write("".join(self._unsaved))
            sys.stderr.flush()
            self._shown = True

    def finish(self) -> None:
        """After the report: the lines the file did not take on stderr and one line saying so
        (``typer.Exit`` with status 1), or nothing when every line was written."""
        if not self._unsaved or self._shown:
            return
        sys.stderr.write("".join(self._unsaved))
        sys.stderr.flush()
        total = self._written + len(self._unsaved)
        raise fail(
            f"--results {self.path}: {len(self._unsaved)} of {total} game lines were not "
            f"written ({self._error}); they are the JSON lines printed on stderr above",
            code=1,
        )


def check_appendable(option: str, path: Path | None) -> None:
    """Refuse ``option``'s append target in one line now, before the games, when it is a link,
    a FIFO, a device or cannot be opened (it is created empty when absent)."""
    if path is not None:
        os.close(_open_or_fail(option, path))


def _open_or_fail(option: str, path: Path) -> int:
    try:
        return open_append(path)
    except UnsafeFileError as err:
        raise fail(f"{option} {err}") from None
    except OSError as err:
        raise fail(f"{option} {path}: {err.strerror or err}") from None
