"""`leaguezero` and `yz` commands run in the test's own process (typer's CliRunner), for
tests about what a command does and says rather than about its process (signals, kills,
workers): each saves the ~3-4 CPU-seconds a fresh interpreter spends importing torch and
numba."""

from __future__ import annotations

import traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    """What ``subprocess.run`` would have shown: the exit status and both streams."""

    returncode: int
    stdout: str
    stderr: str


def here(*args: str) -> Ran:
    """``leaguezero ARGS`` in this process. An exception that escaped the command (a crash,
    not its exit status) is put on stderr as its traceback, as the interpreter would print it."""
    from typer.testing import CliRunner

    from leaguezero.cli import app

    result = CliRunner().invoke(app, list(args))
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        stderr += "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)
        )
    return Ran(result.exit_code, result.stdout, stderr)


def yz_here(*args: str) -> Ran:
    """``yz ARGS`` (``leaguezero yatzy ARGS``) in this process."""
    return here("yatzy", *args)
