"""Child processes that end with the process that started them (league evaluations, Yatzy
self-play workers): :func:`run_child` as a spawned process's target."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

PARENT_POLL_S = 1.0


def exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> None:
    """End this process (``os._exit(1)``) once the process ``parent`` is no longer its parent:
    now, if it died before this call, or within ``poll_s`` seconds of its death (a daemon
    thread watches ``os.getppid()``). A run killed outright (SIGTERM, SIGKILL, OOM) then
    leaves no worker writing on beside the run that resumes it (a league evaluation, self-play
    shards), which redoes that work."""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def run_child(target: Callable[..., Any], parent: int, *args: Any) -> Any:
    """A spawned child's entry: :func:`exit_with_parent`, then ``target(*args)``."""
    exit_with_parent(parent)
    return target(*args)
