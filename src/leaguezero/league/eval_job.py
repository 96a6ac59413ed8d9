"""One job of the league's asynchronous evaluator (:mod:`~.evaluator`): rate a new checkpoint
(docs/reference/design.md#evaluator).

:func:`run_job` is a job's entry point wherever it runs (a fresh "spawn" process,
:class:`~.eval_runner.ProcessRunner`, or a Ray task); the job (:func:`run_evaluation`):

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
lock), so a job that crashes or is killed at any point leaves it readable and consistent.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

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

    # One transaction under the writers' lock: check, rate, save league.json, then log the
    # games. The logged games mark the evaluation done, so they go last: a job killed before
    # them is redone on resume (the same seeded games, the same refit) and a second job for
    # the same (challenger, step) — a resubmitted one beside a survivor — logs nothing.
    with registry.locked():
        logged = log.read(kind="evaluation")
        if evaluation_logged(logged, job.challenger, job.step):
            return _already_rated(job, events)
        state = registry.load()
        ratings, intervals, games = _new_ratings(job, state, logged, results)
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


def _new_ratings(
    job: EvalJob, state: LeagueState, logged: list[MatchResult], results: list[MatchResult]
) -> tuple[dict[str, float], dict[str, tuple[float, float]], dict[str, float]]:
    """The ratings ``job.method`` gives after the evaluation games ``logged`` and the new
    ``results``, with (a refit's) intervals and game counts of the agents it rated; raises
    ``ValueError`` for a league without an anchor (a refit) or an unknown method."""
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
        return ratings, intervals, games
    if job.method == "elo":
        ratings = apply_elo_sequential(results, state.ratings(), k=job.elo_k)
        if anchor is not None:
            ratings[anchor[0]] = anchor[1]  # the anchor stays fixed, as in the refit
        return ratings, {}, {}
    raise ValueError(f"unknown rating method {job.method!r}; use 'refit' or 'elo'")


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
    """A job's entry point in its worker (any :class:`~.eval_runner.JobRunner`): one-thread
    BLAS/numba, then :func:`run_evaluation`; a failure is also logged as
    ``league.evaluation_error``."""
    # A background evaluator must not fight the trainer for cores (2 torch threads beside a
    # busy process ran 30-70x slower than 1; docs/reference/design.md#one-torch-thread-per-process).
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
