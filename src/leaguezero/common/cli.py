"""What every ``leaguezero`` command line shares: the one-line error (:func:`fail`) and the one
way commands are registered.

Registration, the one way (``tests/test_architecture.py`` checks it): every command module owns
a ``typer.Typer`` and decorates its commands with ``@app.command("name")``; a parent app mounts
it with ``parent.add_typer(child)`` — flat, its commands joining the parent's (``yz run``), or
with ``name=`` as a group (``yz oracle sim``, ``leaguezero league show``). No module adds
commands to another module's app.
"""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as one red line on stderr and return the ``typer.Exit`` to raise:
    ``raise fail("...") from None``."""
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code)
