"""The Yatzy loop's Ray backend (``run.backend: ray``, docs/guides/cluster.md): self-play actors and
the train phase as a Ray task, as a :class:`~leaguezero.yatzy.train.loop.Backend` that ``yz run``
hands to the loop. It lives in the command-line layer because it joins ``distributed/`` (which
knows no game) with the Yatzy pipeline (which knows no backend).

Self-play: one actor per worker id, each running many games via ``run_selfplay``; the Ray twin
of :mod:`leaguezero.yatzy.train.selfplay.workers`. Worker ``w`` is an actor that plays its share
of the iteration's games into ``out_dir`` with worker id ``w``, so its shards (and its resume
point) are its own. It evaluates in process (the best checkpoint, one torch thread) or through
one or more inference servers (``selfplay.infer = tcp://h1:p,tcp://h2:p``).

Fault tolerance comes from the replay format, not from Ray state: shards are written whole and
atomically, so when an actor's process dies Ray restarts the actor (``max_restarts``) and
retries its ``play`` call (``max_task_retries``), and ``run_selfplay`` resumes from the worker's
complete shards — the games in flight are replayed, none is counted twice. ``out_dir`` must be
on a filesystem that every node sees (the run directory of docs/guides/cluster.md).

Training: :func:`leaguezero.yatzy.train.loop.train_phase` runs unchanged as a Ray task on
whichever node has the resources (a GPU when ``run.device`` is ``cuda``), reading the replay
window from and writing the candidate checkpoint to the shared run directory; the checkpoint is
written atomically and the phase is deterministic, so a task whose process dies is run again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaguezero.az.evaluator import ClosableEvaluator
from leaguezero.az.replay import games_on_disk
from leaguezero.distributed.runtime import init_ray
from leaguezero.distributed.tasks import run_task
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.loop import Backend, RunDir, train_phase
from leaguezero.yatzy.train.selfplay.slots import SelfPlayStats
from leaguezero.yatzy.train.selfplay.workers import combine_stats, split_games

MAX_RESTARTS = 3  # per actor: a worker that dies more often than this fails the iteration
POLL_S = 0.5  # how often the driver counts finished games on disk


class SelfPlayWorker:
    """Actor body: plays games for one worker id (wrapped by ``ray.remote`` at run time)."""

    def __init__(self, cfg_json: str, worker: int) -> None:
        import torch

        self.cfg = YatzyConfig.model_validate_json(cfg_json)
        self.worker = worker
        torch.set_num_threads(self.cfg.run.threads)

    def pid(self) -> int:
        """The actor's process id (tests kill it to check recovery)."""
        return os.getpid()

    def play(
        self,
        search: dict[str, Any],
        best_path: str,
        out_dir: str,
        games: int,
        seed: int,
        roots_log: str | None,
        oracle_table: str | None,
    ) -> dict[str, Any]:
        """Play until this worker has ``games`` games in complete shards; returns its stats."""
        from leaguezero.common.events import EventWriter
        from leaguezero.yatzy.train.kinds import selfplay_function
        from leaguezero.yatzy.train.selfplay.positions import make_selfplay_evaluator, oracle_values

        settings = SearchSettings.from_dict(search)  # the run's, as the driver built it
        evaluator = make_selfplay_evaluator(self.cfg, settings, Path(best_path))
        oracle = None
        if roots_log is not None:
            from leaguezero.yatzy.oracle.solver import load_oracle

            oracle = load_oracle(oracle_table)
        try:
            stats = selfplay_function(self.cfg.search.kind)(
                self.cfg, evaluator, out_dir, settings=settings, games=games, seed=seed,
                worker=self.worker,
                roots_log=EventWriter(roots_log) if roots_log else None,
                oracle_values=oracle_values(oracle),
            )  # fmt: skip
        finally:
            if isinstance(evaluator, ClosableEvaluator):  # the inference server's client
                evaluator.close()
        return stats.to_dict()


@dataclass
class _Slot:
    worker: int
    games: int
    actor: Any
    ref: Any
    games_before: int


class RaySelfPlay:
    """Driver side of one self-play phase on Ray: start actors, track progress, collect stats.

    Use :func:`run_selfplay_ray` unless you need the pieces (tests kill actors in between).
    """

    def __init__(
        self,
        cfg: YatzyConfig,
        best_path: Path,
        out_dir: Path,
        *,
        games: int,
        seed: int,
        roots_log: Path | None = None,
        oracle_table: Path | None = None,
        settings: SearchSettings | None = None,
    ) -> None:
        self.cfg = cfg
        # None: a phase started here, not by the loop (which hands the run's settings down).
        self.settings = settings or SearchSettings.from_config(cfg)
        self.best_path = Path(best_path).resolve()
        self.out_dir = Path(out_dir).resolve()
        self.games = games
        self.seed = seed
        self.roots_log = None if roots_log is None else str(Path(roots_log).resolve())
        self.oracle_table = None if oracle_table is None else str(Path(oracle_table).resolve())
        self.ray = init_ray(cfg.run.ray_address)
        self.slots: list[_Slot] = []
        self.started = 0.0

    def start(self) -> None:
        """Create one actor per worker and start its ``play`` call."""
        ray = self.ray
        self.out_dir.mkdir(parents=True, exist_ok=True)
        actor_cls = ray.remote(
            num_cpus=1,
            max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_RESTARTS,
            max_concurrency=2,  # so pid() answers while play() runs
        )(SelfPlayWorker)
        cfg_json = self.cfg.model_dump_json()
        self.started = time.perf_counter()
        for w, share in enumerate(split_games(self.games, self.cfg.selfplay.workers)):
            actor = actor_cls.remote(cfg_json, w)
            ref = actor.play.remote(
                self.settings.to_dict(), str(self.best_path), str(self.out_dir), share, self.seed,
                self.roots_log, self.oracle_table,
            )  # fmt: skip
            before = min(games_on_disk(self.out_dir, w), share)
            self.slots.append(_Slot(w, share, actor, ref, before))

    def worker_pids(self, timeout_s: float = 60.0) -> list[int]:
        """Current process id of each worker actor."""
        return self.ray.get([s.actor.pid.remote() for s in self.slots], timeout=timeout_s)

    def games_done(self) -> int:
        """Games of this phase in complete shards on disk (what a crash would keep)."""
        return sum(min(games_on_disk(self.out_dir, s.worker), s.games) for s in self.slots)

    def wait(self, progress: Callable[[int], None] | None = None) -> SelfPlayStats:
        """Block until every worker finished; returns the combined statistics.

        Raises:
            RuntimeError: naming the workers that failed after their restarts (finished games
                stay on disk; a rerun resumes them).
        """
        ray = self.ray
        seen = 0
        pending = [s.ref for s in self.slots]
        results: dict[int, dict[str, Any]] = {}
        failed: list[str] = []
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            for ref in ready:
                slot = next(s for s in self.slots if s.ref == ref)
                try:
                    results[slot.worker] = ray.get(ref)
                except ray.exceptions.RayError as err:
                    failed.append(f"selfplay-{slot.worker} ({type(err).__name__})")
            if progress is not None:
                done = self.games_done()
                if done > seen:
                    progress(done - seen)
                    seen = done
        self.shutdown()
        if failed:
            raise RuntimeError(
                f"ray self-play worker(s) {', '.join(failed)} failed after {MAX_RESTARTS} "
                "restarts; finished games are on disk, rerun (or --resume) to complete them"
            )
        seconds = time.perf_counter() - self.started
        # A restarted actor's stats cover its last attempt only; count games from disk instead.
        games = sum(min(games_on_disk(self.out_dir, s.worker), s.games) - s.games_before
                    for s in self.slots)  # fmt: skip
        return combine_stats([results[s.worker] for s in self.slots], seconds, games)

    def shutdown(self) -> None:
        """Stop the actors (their CPUs go back to the cluster)."""
        for slot in self.slots:
            self.ray.kill(slot.actor, no_restart=True)


def run_selfplay_ray(
    cfg: YatzyConfig,
    best_path: Path,
    out_dir: Path,
    *,
    games: int,
    seed: int,
    roots_log: Path | None = None,
    oracle_table: Path | None = None,
    progress: Callable[[int], None] | None = None,
    settings: SearchSettings | None = None,
) -> SelfPlayStats:
    """``cfg.selfplay.workers`` Ray actors fill one iteration (signature of
    :func:`leaguezero.yatzy.train.selfplay.workers.run_selfplay_workers`); returns the combined
    statistics."""
    phase = RaySelfPlay(
        cfg, best_path, out_dir, games=games, seed=seed, roots_log=roots_log,
        oracle_table=oracle_table, settings=settings,
    )  # fmt: skip
    phase.start()
    try:
        return phase.wait(progress)
    except BaseException:
        phase.shutdown()
        raise


def _train_task(cfg_json: str, run_root: str, it: int) -> dict[str, Any]:
    import torch

    cfg = YatzyConfig.model_validate_json(cfg_json)
    torch.set_num_threads(cfg.run.threads)
    return train_phase(cfg, RunDir(run_root), it, lambda phase, advance, total: None)


def train_phase_on_ray(cfg: YatzyConfig, run: RunDir, it: int, report: Any) -> dict[str, Any]:
    """Run the train phase of iteration ``it`` as a Ray task and wait for its record.

    ``run``'s root must be on a shared filesystem; ``report(phase, advance, total)`` sees the
    phase start and end (the steps run remotely).

    Raises:
        RuntimeError: the task failed after its retries (the message names the cause).
    """
    report("train", 0, cfg.train.steps)
    record = run_task(
        _train_task, cfg.model_dump_json(), str(Path(run.root).resolve()), it,
        ray_address=cfg.run.ray_address, num_gpus=1 if cfg.run.device == "cuda" else 0,
        what=f"trainer task of iteration {it}",
    )  # fmt: skip
    report("train", cfg.train.steps, 0)
    return record


def ray_backend() -> Backend:
    """Self-play on Ray actors (even for one worker) and the train phase as a Ray task."""
    return Backend("ray", run_selfplay_ray, train_phase_on_ray, always_workers=True)
