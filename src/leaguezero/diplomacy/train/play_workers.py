"""A step's games played in helper processes beside the trainer (``train.play_processes``).

The LLM hero's trainer samples its games in process, one torch thread, so on a 2-core machine
one core plays while the other waits, and a second torch thread costs more than it gives on
small shared cores. With ``train.play_processes: N`` the trainer starts ``N - 1`` helper
processes (spawned once, each with its own copy of the base model) and hands each a share of
every group's games: the live hero's weights as an adapter folder, the opponents' adapter
folders, the seating and the seeds. A helper plays its share as the trainer plays its own (one
thread a game, rows batched through the same in-process sampler) and sends the finished games
back; the trainer plays the first share meanwhile. The answers' sampler log-probs come from the
helper's sampler with the same weights, and the trainer scores every record again before its
update as it always does (``old_log_prob_gap``).

A helper that dies or fails a job stops the step with one line naming its error (the run
resumes from its last saved step); helpers stop with the trainer (:meth:`PlayWorkers.close`),
and within a second of its death if it is killed outright (SIGKILL, OOM), even in the middle of
a job (:func:`~leaguezero.common.processes.exit_with_parent`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from leaguezero.common.memory import rss_mb
from leaguezero.common.processes import run_child
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentKind, Seating
from leaguezero.diplomacy.game.records import PlayedGame
from leaguezero.diplomacy.llm.remote.adapters import parse_versioned_name, versioned_name

# How long a helper may take to load the model and answer "ready", and to play a share of a
# step's games: generous bounds that only catch a helper that hangs (a step's games take
# minutes on a CPU; a real model's load tens of seconds on a loaded machine).
START_TIMEOUT_S = 900.0
PLAY_TIMEOUT_S = 6 * 3600.0


class PlayWorkerError(RuntimeError):
    """A helper process failed to start, died, or failed a job (one line)."""


@dataclass(frozen=True)
class GamesJob:
    """One helper's share of a group's games.

    ``cfg_json``: the run's config; ``seeds``/``game_indices``: the games (their seeds and
    places in the group); ``seating``: the league's names (what the games are recorded under);
    ``served``: each power's seat as sampled (league adapters under the run's served names);
    ``hero_adapter``: the live hero's served name, ``adapter_folders``: every adapter the table
    needs, the hero's included, by served name.
    """

    cfg_json: str
    group_idx: int
    game_indices: tuple[int, ...]
    seeds: tuple[int, ...]
    seating: Seating
    served: Seating
    hero_power: str
    hero_adapter: str
    adapter_folders: Mapping[str, str]
    temperature: float


def split_games(count: int, processes: int) -> list[range]:
    """Game indices ``0 .. count-1`` in ``processes`` contiguous shares, the first (the
    trainer's) never smaller than the others: 4 games over 2 processes -> [0, 1], [2, 3];
    5 -> [0, 1, 2], [3, 4]. Empty shares are dropped (fewer games than processes)."""
    base, extra = divmod(count, processes)
    shares, start = [], 0
    for i in range(processes):
        size = base + (1 if i < extra else 0)
        if size:
            shares.append(range(start, start + size))
        start += size
    return shares


class PlayWorkers:
    """``count`` helper processes playing shares of a group's games (module doc).

    ``llm_json``: the config's ``llm`` section, ``threads``: torch threads of each helper,
    ``sampling_rows``: rows a helper's sampling batch holds (the trainer's memory plan).
    Started on construction; each helper has loaded its model once ``__init__`` returns.
    """

    def __init__(self, count: int, llm_json: str, *, threads: int, sampling_rows: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of torch
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self.cpu_seconds = 0.0  # the helpers' CPU over their jobs since take_usage
        self.peak_rss_mb = 0.0
        self._busy: set[int] = set()  # helpers with a job and no answer yet
        try:
            for i in range(count):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=run_child,  # ends with the trainer, even in the middle of a job
                    args=(_serve, os.getpid(), child, llm_json, threads, sampling_rows),
                    name=f"leaguezero-play-{i + 1}",
                    daemon=True,
                )
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
            for i in range(count):
                self._receive(i, START_TIMEOUT_S, "start")
        except BaseException:
            self.close()
            raise

    def play(self, jobs: Sequence[GamesJob], local) -> list[list[PlayedGame]]:
        """Send ``jobs[i]`` to helper ``i``, run ``local()`` (the trainer's own share) in the
        meantime, and return ``[local's result, helper 0's games, ...]``; the helpers' CPU and
        memory add up for :meth:`take_usage`."""
        if len(jobs) > len(self._procs):
            raise ValueError(f"{len(jobs)} jobs for {len(self._procs)} helpers")
        if self._busy:
            raise PlayWorkerError("the play helpers were interrupted in a job: start new ones")
        for i, job in enumerate(jobs):
            self._conns[i].send(job)
        self._busy = set(range(len(jobs)))
        try:
            own = local()
        except Exception:  # collect what was sent even so: the pipes stay in step
            self._collect(len(jobs))
            raise
        # An interruption (Ctrl-C, SIGTERM) leaves the helpers busy: close() ends them at once.
        answers = self._collect(len(jobs))
        for _games, used in answers:
            self.cpu_seconds += used["cpu_s"]
            self.peak_rss_mb = max(self.peak_rss_mb, used["rss_mb"])
        return [own, *(games for games, _used in answers)]

    def _collect(self, count: int) -> list[Any]:
        answers = [self._receive(i, PLAY_TIMEOUT_S, "games") for i in range(count)]
        self._busy = set()
        return answers

    def take_usage(self) -> dict[str, float]:
        """The helpers' CPU-seconds over their jobs and the largest helper's RSS (MB) at a
        job's end since the last call (a step's event reports them beside the trainer's)."""
        usage = {
            "helper_cpu_seconds": round(self.cpu_seconds, 3),
            "helper_rss_mb": round(self.peak_rss_mb, 1),
        }
        self.cpu_seconds, self.peak_rss_mb = 0.0, 0.0
        return usage

    def _receive(self, i: int, timeout_s: float, what: str) -> Any:
        conn, proc = self._conns[i], self._procs[i]
        waited = 0.0
        while not conn.poll(5.0):
            waited += 5.0
            if not proc.is_alive():
                raise PlayWorkerError(
                    f"play helper {i + 1} died (exit code {proc.exitcode}) before sending its "
                    f"{what}: see its output above"
                )
            if waited >= timeout_s:
                raise PlayWorkerError(f"play helper {i + 1} sent no {what} in {timeout_s:.0f} s")
        try:
            status, payload = conn.recv()
        except EOFError:
            message = f"play helper {i + 1} closed its pipe before its {what}"
            raise PlayWorkerError(message) from None
        if status != "ok":
            raise PlayWorkerError(f"play helper {i + 1}: {payload}")
        return payload

    def close(self) -> None:
        """Ask each helper to stop, then end it (terminate after a grace period; at once for
        a helper still playing a job, which an interruption left behind)."""
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(None)
        for i, proc in enumerate(self._procs):
            proc.join(timeout=1 if i in self._busy else 30)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._busy = [], [], set()


def play_processes(cfg: DiplomacyConfig, shared_server: bool, in_process: bool) -> int:
    """``train.play_processes`` as this run uses it: 1 with a server or on Ray (which spread the
    games already; a recipe's setting for the in-process sampler is said on stderr, not
    refused)."""
    wanted = cfg.train.play_processes
    if wanted > 1 and (shared_server or not in_process):
        print(
            f"note: train.play_processes={wanted} is for the in-process sampler "
            "(llm.backend=hf, run.backend=local); the games sample on the server here, from "
            "this process",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return wanted


class HelperPlay:
    """The trainer's side of ``train.play_processes`` (module doc): the helpers, started at
    the first group; the live hero's weights published for them once per update; each
    helper's job; the group played split.

    ``policy``: the GRPO policy (its training adapter, adapters folder and served-name
    prefix); ``backend``: what saves the adapter; ``sampling_rows``: rows of a helper's
    sampling batch (the trainer's memory plan).
    """

    def __init__(self, cfg: DiplomacyConfig, processes: int, policy, backend, sampling_rows: int):
        self.cfg = cfg
        self.processes = processes
        self.policy = policy
        self.backend = backend
        self.sampling_rows = sampling_rows
        self.workers: PlayWorkers | None = None
        self._published: tuple[tuple[int, ...], str] | None = None

    def play(
        self,
        cfg: DiplomacyConfig,
        group_idx: int,
        shares: Sequence[range],
        seeds: Sequence[int],
        seating: Seating,
        served: Seating,
        hero_power: str,
        slots,
        play_own,
    ) -> list[PlayedGame]:
        """The group's games: ``play_own()`` (the trainer's share, ``shares[0]``) here, the
        other shares on the helpers at the same time, in game order. ``slots``: the trainer's
        adapter slots (the opponents' folders by served name)."""
        if len(shares) == 1:
            return play_own()
        name, folder = self._publish()
        tabled = {s.name for s in served.values() if s.kind is AgentKind.LEAGUE}
        folders = {n: f for n, f in slots.folders.items() if n in tabled}
        folders[name] = folder
        cfg_json = cfg.model_dump_json()
        jobs = [
            GamesJob(
                cfg_json=cfg_json,
                group_idx=group_idx,
                game_indices=tuple(share),
                seeds=tuple(seeds[i] for i in share),
                seating=dict(seating),
                served=dict(served),
                hero_power=hero_power,
                hero_adapter=name,
                adapter_folders=folders,
                temperature=self.cfg.train.temperature,
            )
            for share in shares[1:]
        ]
        played = self._workers().play(jobs, play_own)
        return [game for share in played for game in share]

    def _workers(self) -> PlayWorkers:
        if self.workers is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
            if cpus is not None and cpus < self.processes:
                # Helpers inherit the trainer's CPU set (taskset): they would share its cores.
                print(
                    f"warning: train.play_processes={self.processes} but this process may "
                    f"run on {cpus} CPU(s) only (taskset?): its helpers share them",
                    file=sys.stderr,
                    flush=True,
                )
            self.workers = PlayWorkers(
                self.processes - 1,
                self.cfg.llm.model_dump_json(),
                threads=self.cfg.run.threads,
                sampling_rows=self.sampling_rows,
            )
        return self.workers

    def _publish(self) -> tuple[str, str]:
        """The live hero's weights as an adapter folder (``{prefix}-play-vNNNN`` under
        ``llm.adapters_dir``), written once per update; the older ones are removed (a helper
        loads a version before it plays, and plays only the newest)."""
        adapters_dir = self.policy.adapters_dir
        assert adapters_dir is not None
        current = self.policy.weights_version()
        if self._published is not None and self._published[0] == current:
            return self._published[1], str(adapters_dir / self._published[1])
        prefix = f"{self.policy.prefix}-play"
        found = {
            path: parse_versioned_name(path.name) for path in adapters_dir.glob(prefix + "-v*")
        }
        older = {path: v[1] for path, v in found.items() if v is not None and v[0] == prefix}
        name = versioned_name(prefix, max(older.values(), default=0) + 1)
        folder = self.backend.save_adapter(self.policy.TRAIN_ADAPTER, adapters_dir / name)
        for path in older:
            shutil.rmtree(path, ignore_errors=True)
        self._published = (current, name)
        return name, str(folder)

    def take_usage(self) -> dict[str, float]:
        """The helpers' CPU and memory since the last call (:meth:`PlayWorkers.take_usage`)."""
        return {} if self.workers is None else self.workers.take_usage()

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
            self.workers = None


# ----- the helper process --------------------------------------------------------------------
def _serve(conn: Connection, llm_json: str, threads: int, sampling_rows: int) -> None:
    """A helper's main: load the runtime, answer "ready", then play jobs until ``None``."""
    try:
        import torch

        torch.set_num_threads(max(1, threads))
        from transformers.utils import logging as hf_logging

        # No loading bars: the trainer's is enough, and tqdm's lock is a semaphore that a
        # helper ended by terminate() (an interrupted run) would leave behind.
        hf_logging.disable_progress_bar()
        from leaguezero.diplomacy.config.llm import LLMSection
        from leaguezero.diplomacy.llm.runtime import LLMRuntime

        llm = LLMSection.model_validate_json(llm_json)
        runtime = LLMRuntime(llm, batched=True, sampling_rows=lambda _backend: sampling_rows)
    except BaseException as err:  # the trainer gets the reason, not only an exit code
        conn.send(("error", _one_line(err)))
        return
    conn.send(("ok", None))
    live_hero = ""
    try:
        while True:
            job = conn.recv()
            if job is None:
                break
            try:
                assert runtime.slots is not None
                if live_hero and live_hero != job.hero_adapter:
                    runtime.slots.retire(live_hero)  # the superseded version
                runtime.ensure_adapters(job.adapter_folders)
                runtime.slots.pinned.add(job.hero_adapter)
                live_hero = job.hero_adapter
                started = time.process_time()
                games = _play(runtime, job)
                used = {"cpu_s": time.process_time() - started, "rss_mb": rss_mb()}
                conn.send(("ok", (games, used)))
            except Exception as err:
                conn.send(("error", _one_line(err)))
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # the trainer went away (a kill): nobody is left to play for
    finally:
        runtime.close()


def _play(runtime, job: GamesJob) -> list[PlayedGame]:
    """The job's games at once, one thread each (their rows meet in the sampler's batches)."""
    from leaguezero.common.memory import release_freed_memory
    from leaguezero.diplomacy.game.rollout import run_rollout
    from leaguezero.diplomacy.llm.orders.decoding import decoding_named
    from leaguezero.diplomacy.llm.tables import LLMTable
    from leaguezero.diplomacy.train.llm_games import played_game

    cfg = DiplomacyConfig.model_validate_json(job.cfg_json)
    llm = cfg.llm
    sampled = {
        p: s.served_as(job.hero_adapter) if s.kind is AgentKind.HERO else s
        for p, s in job.served.items()
    }
    tables = [
        LLMTable(
            runtime.sampler,
            sampled,
            record_adapter=job.hero_adapter,
            max_new_tokens=llm.max_new_tokens,
            temperature=job.temperature,
            seed=seed,
            render=runtime.render,
            decoding=decoding_named(llm.mode),
        )
        for seed in job.seeds
    ]

    def play(k: int):
        table = tables[k]
        return run_rollout(
            cfg,
            job.group_idx,
            job.game_indices[k],
            table.seating,
            job.hero_power,
            resolver=table.resolver,
        )

    with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="dip-game") as pool:
        results = list(pool.map(play, range(len(tables))))
    release_freed_memory()  # the games' KV caches, between jobs
    return [
        played_game(result, table, job.seating, job.hero_power, llm.format_penalty)
        for table, result in zip(tables, results, strict=True)
    ]


def _one_line(err: BaseException) -> str:
    """``Type: message`` and the innermost frame, on one line."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    message = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {message}{where}"
