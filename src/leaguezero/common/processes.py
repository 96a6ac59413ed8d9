"""Child processes that end with the process that started them (league evaluations, Yatzy
self-play workers, LLM play helpers): :func:`run_child` as a spawned process's target."""

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


def thread_lock_for_progress_bars() -> None:
    """Give tqdm's bars (transformers' "Loading weights", Hugging Face's downloads) a thread
    lock instead of the ``multiprocessing.RLock`` tqdm creates with the first bar: a named
    semaphore that a child stopped by ``terminate()`` (an interrupted run's evaluation or
    play helper) never unlinks, so the run's last line was ``resource_tracker: There appear
    to be 1 leaked semaphore objects``. A child's bars go to the run's stderr one process at
    a time anyway; tqdm documents ``set_lock`` for this. Without tqdm, nothing to do."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


def run_child(target: Callable[..., Any], parent: int, *args: Any) -> Any:
    """A spawned child's entry: :func:`exit_with_parent`, progress bars without a
    cross-process lock (:func:`thread_lock_for_progress_bars`), then ``target(*args)``."""
    exit_with_parent(parent)
    thread_lock_for_progress_bars()
    return target(*args)
