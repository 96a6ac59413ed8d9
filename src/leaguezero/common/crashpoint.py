"""A test-only crash hook: SIGKILL this process at a named point of a named step.

Crash-consistency tests need a kill at an exact place (say, between logging a step's games and
saving the state that marks the step done), which no timed ``kill`` from outside can hit
reliably. A loop calls :func:`crash_point` at such places; it does nothing unless the
environment variable ``LEAGUEZERO_CRASH_AT`` is ``NAME:STEP`` for this very call, and then
kills the process with SIGKILL (no ``finally``, no ``atexit``: what a power cut or the OOM
killer does). A process that leads its own process group (started with
``start_new_session=True``) kills the whole group, so background workers it spawned (the
league evaluator) die with it, as they do when the machine goes away.

Points in use: ``diplomacy.recorded`` (the step's games are in the match log, the state is not
saved yet) and ``diplomacy.step_done`` (the step is finished, its evaluation submitted).
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "LEAGUEZERO_CRASH_AT"


def crash_point(name: str, step: int) -> None:
    """SIGKILL this process (its group, when it leads one) if ``LEAGUEZERO_CRASH_AT`` is
    ``f"{name}:{step}"``; otherwise return at once."""
    if os.environ.get(CRASH_ENV) != f"{name}:{step}":
        return
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
