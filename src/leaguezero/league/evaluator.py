"""The asynchronous league evaluator: rate a new checkpoint without pausing training
(docs/design.md#evaluator).

Every ``every`` training steps the trainer calls :meth:`AsyncEvaluator.maybe_submit`; the job
runs in a separate process (``multiprocessing`` "spawn" context — a fresh interpreter, the
local stand-in for Modal's ``spawn()``), or wherever an injected :class:`JobRunner` puts it
(a Ray task: ``leaguezero.distributed.evaluator``).
The job:

1. loads ``league.json`` and picks gatekeepers for the challenger (:func:`choose_gatekeepers`:
   the anchor baseline, the previous best checkpoint, the most recent earlier snapshot);
2. runs the game's tournament, a module-level function the caller hands in (it crosses to the
   fresh process by reference, so the process imports its module), called as
   ``fn(challenger: AgentInfo, gatekeepers: list[AgentInfo], seed=..., **tournament_kwargs)``
   and returning ``list[MatchResult]`` (agent paths are resolved to absolute paths first);
3. recomputes ratings — by default the batch Bradley–Terry refit of the whole evaluation log
   and the new games, anchored at the registry's anchor, with bootstrap intervals
   (``method="refit"``), or the design's online multi-player Elo over the new games
   (``method="elo"``) — and stores them in ``league.json``;
4. appends the games to the match log (kind ``"evaluation"``, the challenger's step,
   ``meta["challenger"]``); 3 and 4 are one transaction under the registry's file lock;
5. emits ``league.elo_updated``, then ``league.evaluation_finished`` with the job's summary
   and, when the caller hands in a ``summary`` function (module-level, like the tournament:
   ``fn(results, **tournament_kwargs) -> dict``), the fields it returns (Diplomacy: the
   challenger's record against the fixed benchmark suite).

An evaluation is done when its games are in the log (:func:`evaluation_logged`), and a job
finds that out before it plays and again under the lock before it writes: a (challenger, step)
pair is rated once however often it is submitted (a resumed run resubmits the jobs its
killed predecessor had pending, which may still have finished, or still be running as an
orphan) — the extra job only emits ``league.evaluation_already_rated``.

The registry is only written through :meth:`LeagueRegistry.update` (atomic replace under a
lock), so a job that crashes or is killed at any point leaves it readable and consistent. A job
that exits non-zero is reported (``league.evaluation_failed``) and retried up to
``max_retries`` times. One job runs at a time; a request that arrives while one runs replaces
any older waiting request (``league.evaluation_skipped``), so a slow evaluator never builds an
unbounded queue behind training.
"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from leaguezero.common.events import EventWriter
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.rating import apply_elo_sequential, fit_ratings
from leaguezero.league.registry import LeagueRegistry, LeagueState
from leaguezero.league.tracking import emit_elo_updated
from leaguezero.league.types import AgentInfo, MatchResult

Tournament = Callable[..., list[MatchResult]]


@dataclass(frozen=True)
class EvalJob:
    """Everything one evaluation needs; plain data so it crosses process boundaries."""

    registry_path: str
    matchlog_path: str
    events_path: str | None
    challenger: str
    step: int
    tournament: Tournament  # a module-level function (pickled by reference)
    tournament_kwargs: dict[str, Any] = field(default_factory=dict)
    summary: Callable[..., dict[str, Any]] | None = None  # extra fields of evaluation_finished
    gatekeepers: tuple[str, ...] | None = None  # None: choose_gatekeepers
    method: str = "refit"  # "refit" (batch Bradley–Terry) or "elo" (online)
    elo_k: float = 32.0
    bootstrap: int = 100
    seed: int = 0


def check_tournament(fn: Tournament) -> Tournament:
    """``fn`` if a fresh process can find it (a module-level function of an importable
    module); raises ``ValueError`` saying what is wrong."""
    if not callable(fn):
        raise ValueError(f"tournament {fn!r} is not a function")
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in name or "." in name:
        raise ValueError(
            f"tournament {module}.{name}: pass a module-level function of an importable module "
            "(the evaluator's process imports it)"
        )
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as err:
        raise ValueError(f"tournament {module}.{name}: cannot import {module} ({err})") from None
    if found is not fn:
        raise ValueError(f"tournament {module}.{name}: {module} has no such function")
    return fn


def choose_gatekeepers(state: LeagueState, challenger: str) -> list[str]:
    """The design's basket: the anchor baseline ("random"), the previous best checkpoint, and the
    most recent snapshot before the challenger — distinct, excluding the challenger."""
    picks: list[str] = []
    if state.anchor is not None:
        picks.append(state.anchor[0])
    elif state.baselines:
        picks.append(min(state.baselines, key=lambda a: a.elo).name)
    others = [a for a in state.checkpoints if a.name != challenger and not a.extra.get("retired")]
    if others:
        picks.append(max(others, key=lambda a: (a.elo, a.step or 0)).name)
        own = state.agents.get(challenger)
        own_step = own.step if own is not None and own.step is not None else None
        earlier = [a for a in others if own_step is None or (a.step or 0) < own_step]
        if earlier:
            picks.append(earlier[-1].name)
    return list(dict.fromkeys(p for p in picks if p != challenger))


def _with_absolute_path(registry: LeagueRegistry, agent: AgentInfo) -> AgentInfo:
    if agent.path is None:
        return agent
    return dataclasses.replace(agent, path=str(registry.resolve(agent.path)))


def run_evaluation(job: EvalJob) -> dict[str, Any]:
    """Run one evaluation in this process (see the module docstring); returns a summary."""
    registry = LeagueRegistry(job.registry_path)
    events = EventWriter(job.events_path) if job.events_path else None
    state = registry.load()
    if job.challenger not in state.agents:
        raise ValueError(f"challenger {job.challenger!r} is not in {job.registry_path}")
    gatekeepers = list(job.gatekeepers or choose_gatekeepers(state, job.challenger))
    missing = [g for g in gatekeepers if g not in state.agents]
    if missing:
        raise ValueError(f"gatekeepers not in the league: {', '.join(missing)}")
    tournament = job.tournament
    challenger = _with_absolute_path(registry, state.agents[job.challenger])
    keepers = [_with_absolute_path(registry, state.agents[g]) for g in gatekeepers]
    log = MatchLog(job.matchlog_path)
    if evaluation_logged(log.read(kind="evaluation"), job.challenger, job.step):
        return _already_rated(job, events)  # e.g. a resubmitted job whose first run finished
    started = time.time()
    results = tournament(challenger, keepers, seed=job.seed, **job.tournament_kwargs)
    results = [
        dataclasses.replace(
            r,
            step=job.step,
            kind="evaluation",
            meta={**r.meta, "eval": True, "challenger": job.challenger},
        )
        for r in results
    ]

    intervals: dict[str, tuple[float, float]] = {}
    games: dict[str, float] = {}
    # One transaction under the writers' lock: check, rate, save league.json, then log the
    # games. The logged games mark the evaluation done, so they go last: a job killed before
    # them is redone on resume (the same seeded games, the same refit) and a second job for
    # the same (challenger, step) — a resubmitted one beside a survivor — logs nothing.
    with registry.locked():
        logged = log.read(kind="evaluation")
        if evaluation_logged(logged, job.challenger, job.step):
            return _already_rated(job, events)
        state = registry.load()
        anchor = state.anchor
        if job.method == "refit":
            if anchor is None:
                raise ValueError("league has no rating anchor; recreate it with baselines")
            fit = fit_ratings(
                [*logged, *results],
                anchor=anchor[0],
                anchor_elo=anchor[1],
                bootstrap=job.bootstrap,
                seed=job.seed,
            )
            # Only agents with games get a fitted rating; the rest keep theirs.
            ratings = {n: r for n, r in fit.ratings.items() if fit.games.get(n, 0.0) > 0}
            intervals = {n: iv for n, iv in fit.intervals().items() if n in ratings}
            games = {n: round(fit.games[n], 3) for n in ratings}
        elif job.method == "elo":
            ratings = apply_elo_sequential(results, state.ratings(), k=job.elo_k)
            if anchor is not None:
                ratings[anchor[0]] = anchor[1]  # the anchor stays fixed, as in the refit
        else:
            raise ValueError(f"unknown rating method {job.method!r}; use 'refit' or 'elo'")
        state.record_matches(results)
        state.set_ratings(ratings, intervals=intervals, step=job.step)
        baselines = [a.name for a in state.baselines]
        known = {n: v for n, v in ratings.items() if n in state.agents}
        registry.save(state)
        log.extend(results)
    emit_elo_updated(
        events,
        step=job.step,
        challenger=job.challenger,
        ratings=known,
        intervals=intervals,
        games=games,
        baselines=baselines,
        method=job.method,
    )
    summary = {
        "challenger": job.challenger,
        "step": job.step,
        "gatekeepers": gatekeepers,
        "games": len(results),
        "challenger_elo": known.get(job.challenger),
        "seconds": round(time.time() - started, 3),
    }
    if job.summary is not None:
        summary.update(job.summary(results, **job.tournament_kwargs))
    if events is not None:
        events.emit("league.evaluation_finished", **summary)
        events.close()
    return summary


def evaluation_logged(results: Iterable[MatchResult], challenger: str, step: int) -> bool:
    """Whether the evaluation games ``results`` (``MatchLog.read(kind="evaluation")``) hold an
    evaluation of ``challenger`` at ``step``: games tagged ``meta["challenger"]``, or (logs
    from before the tag) games of that step it played in."""
    for r in results:
        if r.step != step:
            continue
        tagged = r.meta.get("challenger")
        if tagged == challenger or (tagged is None and challenger in r.agents):
            return True
    return False


def _already_rated(job: EvalJob, events: EventWriter | None) -> dict[str, Any]:
    summary = {"challenger": job.challenger, "step": job.step, "already_rated": True}
    if events is not None:
        events.emit("league.evaluation_already_rated", **summary)
        events.close()
    return summary


def run_job(job: EvalJob, threads: int) -> None:
    """A job's entry point in its worker (any :class:`JobRunner`): one-thread BLAS/numba, then
    :func:`run_evaluation`; a failure is also logged as ``league.evaluation_error``."""
    # A background evaluator must not fight the trainer for cores (2 torch threads beside a
    # busy process ran 30-70x slower than 1; docs/design.md#one-torch-thread-per-process).
    # Set before the tournament imports torch or numba, which read these at import; importing
    # torch here would cost seconds per job.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        run_evaluation(job)
    except BaseException:
        if job.events_path:
            with EventWriter(job.events_path) as events:
                events.emit(
                    "league.evaluation_error",
                    challenger=job.challenger,
                    step=job.step,
                    error=traceback.format_exc(limit=5),
                )
        raise


@dataclass(frozen=True)
class JobOutcome:
    """How a finished attempt ended: ``ok``, or the details a failure report carries
    (``exitcode`` of a process, ``error`` of a remote task)."""

    ok: bool
    details: dict[str, Any] = field(default_factory=dict)


class JobRunner(Protocol):
    """Where :class:`AsyncEvaluator` runs its jobs: the extension point for other backends.

    ``start`` launches :func:`run_job` (``job``, ``threads``) somewhere and returns a handle;
    ``outcome`` is None while it runs, then a :class:`JobOutcome` (cheap, non-blocking);
    ``join`` blocks up to ``timeout`` seconds; ``cancel`` stops it; ``pid`` is its process id
    when it has one of its own. ``name`` is logged with ``league.evaluation_started``. The
    default is :class:`ProcessRunner`; ``leaguezero.distributed.evaluator.RayJobRunner`` runs
    jobs as Ray tasks.
    """

    name: str

    def start(self, job: EvalJob, threads: int) -> Any: ...

    def outcome(self, handle: Any) -> JobOutcome | None: ...

    def join(self, handle: Any, timeout: float) -> None: ...

    def cancel(self, handle: Any) -> None: ...

    def pid(self, handle: Any) -> int | None: ...


class ProcessRunner:
    """Each job in a fresh ``multiprocessing`` "spawn" process (the local ``spawn()``)."""

    name = "process"

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")

    def start(self, job: EvalJob, threads: int) -> mp.process.BaseProcess:
        process = self._ctx.Process(
            target=run_job, args=(job, threads), name=f"league-eval-{job.step}"
        )
        process.start()
        return process

    def outcome(self, handle: mp.process.BaseProcess) -> JobOutcome | None:
        if handle.is_alive():
            return None
        handle.join()
        code = handle.exitcode
        return JobOutcome(True) if code == 0 else JobOutcome(False, {"exitcode": code})

    def join(self, handle: mp.process.BaseProcess, timeout: float) -> None:
        handle.join(timeout)

    def cancel(self, handle: mp.process.BaseProcess) -> None:
        handle.terminate()
        handle.join(10)

    def pid(self, handle: mp.process.BaseProcess) -> int | None:
        return handle.pid


@dataclass
class _Running:
    job: EvalJob
    handle: Any
    attempt: int


class AsyncEvaluator:
    """Runs :func:`run_evaluation` jobs in the background for a training loop.

    Call :meth:`maybe_submit` every step and :meth:`poll` now and then (it is cheap); call
    :meth:`close` (or use as a context manager) at the end to wait for the last job. Failed jobs
    (non-zero exit, including being killed) are reported and retried ``max_retries`` times.
    ``runner`` says where jobs run (:class:`JobRunner`; default a local process per job);
    ``summary`` (a module-level function) adds fields to ``league.evaluation_finished``.
    """

    def __init__(
        self,
        *,
        registry_path: str | os.PathLike,
        matchlog_path: str | os.PathLike,
        events_path: str | os.PathLike | None,
        tournament: Tournament,
        tournament_kwargs: dict[str, Any] | None = None,
        summary: Callable[..., dict[str, Any]] | None = None,
        every: int = 50,
        method: str = "refit",
        elo_k: float = 32.0,
        bootstrap: int = 100,
        max_retries: int = 2,
        threads: int = 1,
        seed: int = 0,
        runner: JobRunner | None = None,
    ) -> None:
        check_tournament(tournament)  # fail fast in the trainer, not in a background process
        if summary is not None:
            check_tournament(summary)  # crosses to the job's process the same way
        if every < 1:
            raise ValueError(f"evaluator every must be >= 1, got {every}")
        self.registry_path = str(registry_path)
        self.matchlog_path = str(matchlog_path)
        self.events_path = None if events_path is None else str(events_path)
        self.events = EventWriter(events_path) if events_path is not None else None
        self.tournament = tournament
        self.tournament_kwargs = dict(tournament_kwargs or {})
        self.summary = summary
        self.every = every
        self.method = method
        self.elo_k = elo_k
        self.bootstrap = bootstrap
        self.max_retries = max_retries
        self.threads = threads
        self.seed = seed
        self.runner: JobRunner = runner if runner is not None else ProcessRunner()
        self._running: _Running | None = None
        self._waiting: EvalJob | None = None
        self.completed: list[EvalJob] = []
        self.failed: list[EvalJob] = []

    def maybe_submit(self, step: int, challenger: str) -> bool:
        """Submit an evaluation of ``challenger`` when ``step`` is a multiple of ``every``."""
        if step % self.every != 0:
            return False
        self.submit(step, challenger)
        return True

    def submit(self, step: int, challenger: str, gatekeepers: list[str] | None = None) -> None:
        """Queue an evaluation; starts at once if no job is running."""
        job = EvalJob(
            registry_path=self.registry_path,
            matchlog_path=self.matchlog_path,
            events_path=self.events_path,
            challenger=challenger,
            step=step,
            tournament=self.tournament,
            tournament_kwargs=self.tournament_kwargs,
            summary=self.summary,
            gatekeepers=None if gatekeepers is None else tuple(gatekeepers),
            method=self.method,
            elo_k=self.elo_k,
            bootstrap=self.bootstrap,
            seed=self.seed + step,
        )
        if self._waiting is not None:
            self._emit("league.evaluation_skipped", job=self._waiting, replaced_by=challenger)
        self._waiting = job
        self.poll()

    def poll(self) -> None:
        """Reap a finished job (reporting and retrying failures) and start a waiting one."""
        running = self._running
        if running is not None:
            outcome = self.runner.outcome(running.handle)
            if outcome is not None:
                self._running = None
                if outcome.ok:
                    self.completed.append(running.job)
                else:
                    self._job_failed(running.job, running.attempt, **outcome.details)
        if self._running is None and self._waiting is not None:
            job, self._waiting = self._waiting, None
            self._start(job, 0)

    def _job_failed(self, job: EvalJob, attempt: int, **details: Any) -> None:
        """Report a failed attempt (``league.evaluation_failed`` with ``details``); start the
        next attempt, or give the job up after ``max_retries`` retries."""
        retry = attempt < self.max_retries
        self._emit("league.evaluation_failed", job=job, **details, attempt=attempt, retrying=retry)
        if retry:
            self._start(job, attempt + 1)
        else:
            self.failed.append(job)

    @property
    def busy(self) -> bool:
        return self._running is not None or self._waiting is not None

    def pending(self) -> list[dict[str, Any]]:
        """The running and the waiting job (challenger, step, gatekeepers), oldest first: what
        a training state saves, so that a run killed with them unfinished submits them again
        (:meth:`leaguezero.league.session.LeagueSession.resume`)."""
        jobs = [self._running.job] if self._running is not None else []
        jobs += [self._waiting] if self._waiting is not None else []
        return [
            {
                "challenger": job.challenger,
                "step": job.step,
                "gatekeepers": None if job.gatekeepers is None else list(job.gatekeepers),
            }
            for job in jobs
        ]

    def running_pid(self) -> int | None:
        """The running job's process id (None when idle or when the runner has none)."""
        return None if self._running is None else self.runner.pid(self._running.handle)

    def wait(self, timeout: float = 600.0) -> bool:
        """Block until no job runs or waits (retries included); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.busy:
            if time.monotonic() > deadline:
                return False
            if self._running is not None:
                self.runner.join(self._running.handle, 0.05)
            self.poll()
        return True

    def close(self, timeout: float = 600.0) -> None:
        """Wait for the last job (at most ``timeout`` s), then cancel whatever still runs."""
        finished = self.wait(timeout)
        if not finished and self._running is not None:
            self.runner.cancel(self._running.handle)
        if self.events is not None:
            self.events.close()

    def __enter__(self) -> AsyncEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, job: EvalJob, attempt: int) -> None:
        handle = self.runner.start(job, self.threads)
        self._running = _Running(job, handle, attempt)
        self._emit(
            "league.evaluation_started",
            job=job,
            attempt=attempt,
            pid=self.runner.pid(handle),
            backend=self.runner.name,
        )

    def _emit(self, event: str, *, job: EvalJob, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, challenger=job.challenger, step=job.step, **fields)


def evaluator_paths(run_dir: str | os.PathLike) -> dict[str, Path]:
    """The conventional file names inside a run directory."""
    run = Path(run_dir)
    return {
        "registry": run / "league.json",
        "matchlog": run / "league_matches.ndjson",
        "events": run / "events.ndjson",
    }
