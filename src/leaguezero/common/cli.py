"""What every ``leaguezero`` command line shares: the one-line error (:func:`fail`) and the one
way commands are registered.

Registration, the one way (``tests/test_architecture.py`` checks it): every command module owns
a ``typer.Typer`` and decorates its commands with ``@app.command("name")``; a parent app mounts
it with ``parent.add_typer(child)`` — flat, its commands joining the parent's (``yz run``), or
with ``name=`` as a group (``yz oracle sim``, ``leaguezero league show``). No module adds
commands to another module's app.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

import typer


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as one red line on stderr and return the ``typer.Exit`` to raise:
    ``raise fail("...") from None``."""
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, ``kill`` (SIGTERM) unwinds like Ctrl-C: a ``KeyboardInterrupt`` in the
    main thread, so ``finally`` blocks stop workers and a long command can say how to resume.
    (Python's default is to die at once, leaving helpers and their resources to the OS.)"""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (a test calling a command in one)
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
