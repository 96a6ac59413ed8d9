"""The league registry: ``league.json``, the persistent table of agents
(docs/reference/design.md#registry-and-cold-start).

Format (``schema_version`` 1)::

    {
      "schema_version": 1,
      "agents": {
        "random":  {"type": "baseline", "elo": 800, "matches": 0, "path": null, ...},
        "ckpt_000050": {"type": "checkpoint", "elo": 1200, "matches": 40,
                        "path": "checkpoints/ckpt_000050.pt", "step": 50,
                        "created_at": "2025-12-06T10:00:00+00:00", "parent": "ckpt_000040",
                        "elo_low": 1150.2, "elo_high": 1251.7}
      },
      "history": [{"ts": ..., "step": 50, "event": "elo_updated", "elo": {...}}, ...],
      "metadata": {"run_name": "...", "best_elo": 1200, "best_agent": "ckpt_000050",
                   "anchor": "random", "anchor_elo": 800, "created_at": "..."}
    }

``history`` is a bounded list of recent league events for quick inspection; the complete record
of games is the append-only match log (:mod:`leaguezero.league.matchlog`), from which ratings
can always be recomputed. ``best_elo``/``best_agent`` are over checkpoints only (baselines are
not the hero), and are null before the first checkpoint.

Concurrency: readers need no lock, because every write replaces the whole file atomically
(temp file + ``os.replace``), so a reader sees either the old or the new file. Writers do
read-modify-write inside :meth:`LeagueRegistry.update`, which holds an exclusive
``filelock.FileLock`` on ``league.json.lock``. The OS drops the lock of a killed writer, and a
writer killed mid-write leaves only a stray temp file (``.league.json.*.tmp``), never a torn
``league.json``; the next writer to take the lock removes such files (only a lock holder
writes one, so any found then belongs to a dead writer). On a shared
network filesystem the lock is an ``fcntl``/``flock`` lock; NFSv4 and most cluster filesystems
honour it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from leaguezero.common.atomic import atomic_write_json
from leaguezero.league.types import AgentInfo, AgentKind, MatchResult

REGISTRY_SCHEMA_VERSION = 1
DEFAULT_MAX_HISTORY = 500


class RegistryError(RuntimeError):
    """``league.json`` is missing, unreadable, of another schema version, or inconsistent."""


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string (the format of ``created_at``)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class LeagueState:
    """The contents of ``league.json`` in memory; mutate it inside :meth:`LeagueRegistry.update`."""

    agents: dict[str, AgentInfo] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    max_history: int = DEFAULT_MAX_HISTORY

    # ----- views -------------------------------------------------------------------------
    @property
    def checkpoints(self) -> list[AgentInfo]:
        """Checkpoint agents, oldest step first."""
        found = [a for a in self.agents.values() if a.type == AgentKind.CHECKPOINT]
        return sorted(found, key=lambda a: (a.step if a.step is not None else -1, a.name))

    @property
    def baselines(self) -> list[AgentInfo]:
        return [a for a in self.agents.values() if a.type == AgentKind.BASELINE]

    @property
    def latest_step(self) -> int:
        """The step of the newest checkpoint, or 0 when there is none."""
        steps = [a.step for a in self.checkpoints if a.step is not None]
        return max(steps) if steps else 0

    @property
    def latest_checkpoint(self) -> AgentInfo | None:
        cps = self.checkpoints
        return cps[-1] if cps else None

    @property
    def best_elo(self) -> float:
        """The best checkpoint rating, or ``-inf`` before the first checkpoint."""
        value = self.metadata.get("best_elo")
        return float("-inf") if value is None else float(value)

    @property
    def best_agent(self) -> str | None:
        return self.metadata.get("best_agent")

    @property
    def anchor(self) -> tuple[str, float] | None:
        """(agent, fixed rating) that pins the rating scale in batch refits."""
        name = self.metadata.get("anchor")
        return None if name is None else (name, float(self.metadata["anchor_elo"]))

    def ratings(self) -> dict[str, float]:
        return {name: a.elo for name, a in self.agents.items()}

    # ----- changes -----------------------------------------------------------------------
    def log(self, event: str, **fields: Any) -> None:
        """Append a record to the bounded ``history`` list."""
        self.history.append(
            {"ts": round(dt.datetime.now(dt.UTC).timestamp(), 3), "event": event, **fields}
        )
        if len(self.history) > self.max_history:
            del self.history[: len(self.history) - self.max_history]

    def add_checkpoint(
        self,
        name: str,
        *,
        path: str | None,
        step: int,
        elo: float | None = None,
        parent: str | None = None,
        extra: Mapping[str, Any] | None = None,
        kind: AgentKind = AgentKind.CHECKPOINT,
    ) -> AgentInfo:
        """Register a hero checkpoint (or, with ``kind``, an exploiter's snapshot) and return it.

        The initial rating is ``elo`` if given, else the parent's rating (a fresh snapshot is
        about as strong as the model it came from), else the newest checkpoint's, else the
        anchor's. ``parent`` defaults to the newest checkpoint (lineage). Raises
        ``RegistryError`` when the name is taken or the parent is unknown.
        """
        if name in self.agents:
            raise RegistryError(f"agent {name!r} is already in the league; pick another name")
        latest = self.latest_checkpoint
        if parent is None and latest is not None:
            parent = latest.name
        if parent is not None and parent not in self.agents:
            raise RegistryError(f"parent {parent!r} of {name!r} is not in the league")
        if elo is None:
            if parent is not None:
                elo = self.agents[parent].elo
            else:
                elo = self.anchor[1] if self.anchor else 1000.0
        info = AgentInfo(
            name=name,
            type=kind,
            elo=float(elo),
            path=path,
            step=int(step),
            created_at=utc_now(),
            parent=parent,
            extra=dict(extra or {}),
        )
        self.agents[name] = info
        self._refresh_best()
        event = "checkpoint_added" if kind is AgentKind.CHECKPOINT else "exploiter_added"
        self.log(event, step=int(step), agent=name, elo=info.elo, parent=parent)
        return info

    def set_ratings(
        self,
        ratings: Mapping[str, float],
        *,
        intervals: Mapping[str, tuple[float, float]] | None = None,
        step: int | None = None,
    ) -> None:
        """Store new ratings (and optional (low, high) intervals); unknown names are ignored
        so that a refit over an old log does not resurrect dropped checkpoints."""
        for name, value in ratings.items():
            agent = self.agents.get(name)
            if agent is None:
                continue
            agent.elo = float(value)
            if intervals and name in intervals:
                agent.elo_low, agent.elo_high = (float(x) for x in intervals[name])
        self._refresh_best()
        known = {n: round(float(v), 2) for n, v in ratings.items() if n in self.agents}
        self.log("elo_updated", step=step, elo=known)

    def record_matches(self, results: list[MatchResult]) -> None:
        """Count each result once for every distinct agent in it (the ``matches`` field)."""
        for result in results:
            for name in result.agents:
                if name in self.agents:
                    self.agents[name].matches += 1

    def drop(self, name: str) -> AgentInfo:
        """Remove an agent (e.g. a checkpoint whose file is gone) and return it."""
        info = self.agents.pop(name)
        self._refresh_best()
        return info

    def _refresh_best(self) -> None:
        cps = self.checkpoints
        if not cps:
            self.metadata["best_elo"] = None
            self.metadata["best_agent"] = None
            return
        best = max(cps, key=lambda a: (a.elo, a.step or 0))
        self.metadata["best_elo"] = best.elo
        self.metadata["best_agent"] = best.name

    # ----- (de)serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": REGISTRY_SCHEMA_VERSION,
            "agents": {name: a.to_dict() for name, a in self.agents.items()},
            "history": list(self.history),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "league.json") -> LeagueState:
        """Validate and build; raises :class:`RegistryError` with a one-line reason."""
        if not isinstance(data, dict):
            raise RegistryError(f"{source}: expected a JSON object at the top level")
        version = data.get("schema_version")
        if version != REGISTRY_SCHEMA_VERSION:
            raise RegistryError(
                f"{source}: schema_version {version!r}, this leaguezero reads "
                f"{REGISTRY_SCHEMA_VERSION}; use a matching leaguezero or migrate the file"
            )
        agents_raw = data.get("agents")
        if not isinstance(agents_raw, dict):
            raise RegistryError(f"{source}: 'agents' must be an object")
        try:
            agents = {name: AgentInfo.from_dict(name, raw) for name, raw in agents_raw.items()}
        except ValueError as err:
            raise RegistryError(f"{source}: {err}") from None
        history = data.get("history") or []
        metadata = data.get("metadata") or {}
        if not isinstance(history, list) or not isinstance(metadata, dict):
            raise RegistryError(f"{source}: 'history' must be a list and 'metadata' an object")
        return cls(agents=agents, history=history, metadata=metadata)


class LeagueRegistry:
    """Process-safe access to one ``league.json`` (see the module docstring).

    ``load()`` returns a snapshot; ``with registry.update() as state:`` mutates under the lock
    and saves atomically when the block exits without an exception (an exception leaves the
    file untouched). Checkpoint paths that are relative are relative to the registry's folder.
    """

    def __init__(self, path: str | os.PathLike, *, lock_timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout = lock_timeout

    # ----- creation ----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        run_name: str,
        baselines: Mapping[str, float],
        anchor: str | None = None,
        exist_ok: bool = True,
        lock_timeout: float = 120.0,
    ) -> LeagueRegistry:
        """Cold start: a league holding only the game's baselines
        (docs/reference/design.md#registry-and-cold-start).

        ``baselines`` maps each baseline agent to its initial rating, e.g. Diplomacy
        ``{"base_model": 1000, "random_bot": 800, "chaos_bot": 900}`` or Yatzy
        ``{"random": 800, "greedy": 1000, "oracle": 1400}``. ``anchor`` (default: the first
        baseline) keeps its rating fixed in batch refits, which pins the scale. If the file
        already exists it is validated and kept (``exist_ok``) — never silently reset.
        """
        registry = cls(path, lock_timeout=lock_timeout)
        if not baselines:
            raise RegistryError("a league needs at least one baseline to anchor its ratings")
        anchor = anchor or next(iter(baselines))
        if anchor not in baselines:
            raise RegistryError(f"anchor {anchor!r} is not one of the baselines {list(baselines)}")
        with registry._locked():
            if registry.path.exists():
                if not exist_ok:
                    raise RegistryError(f"{registry.path} already exists")
                registry._read()  # validates; raises on a bad file
                return registry
            state = LeagueState(
                agents={
                    name: AgentInfo(name=name, type=AgentKind.BASELINE, elo=float(elo))
                    for name, elo in baselines.items()
                },
                metadata={
                    "run_name": run_name,
                    "best_elo": None,
                    "best_agent": None,
                    "anchor": anchor,
                    "anchor_elo": float(baselines[anchor]),
                    "created_at": utc_now(),
                },
            )
            registry._write(state)
        return registry

    # ----- reading and writing -----------------------------------------------------------
    def load(self) -> LeagueState:
        """A snapshot of the league (no lock needed: writes are atomic replaces)."""
        return self._read()

    @contextlib.contextmanager
    def update(self) -> Iterator[LeagueState]:
        """Read-modify-write under the file lock; saved atomically on a clean exit."""
        with self._locked():
            state = self._read()
            yield state
            self._write(state)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the writers' lock for a longer transaction: load, :meth:`save`, and the match
        log changes that must not interleave with another writer's (the evaluator's appends,
        :meth:`~leaguezero.league.matchlog.MatchLog.drop`)."""
        with self._locked():
            yield

    def save(self, state: LeagueState) -> None:
        """Write ``state`` atomically; only inside :meth:`locked` (:meth:`update` does both)."""
        self._write(state)

    def reconcile(self) -> list[str]:
        """Drop checkpoints (and exploiter snapshots) whose file no longer exists; returns the
        dropped names.

        Run this when a run resumes: a checkpoint deleted by hand or lost with a machine must
        not be sampled as an opponent. Baselines (and checkpoints with no path) are kept.
        """
        with self._locked():
            state = self._read()
            dropped = [
                a.name
                for a in state.agents.values()
                if a.type is not AgentKind.BASELINE
                and a.path is not None
                and not self.resolve(a.path).exists()
            ]
            if dropped:
                for name in dropped:
                    state.drop(name)
                state.log("checkpoints_dropped", agents=dropped, reason="file missing")
                self._write(state)
        return dropped

    def resolve(self, agent_path: str) -> Path:
        """An agent's ``path`` as a filesystem path (relative paths are under the run dir)."""
        p = Path(agent_path)
        return p if p.is_absolute() else self.path.parent / p

    # Spec-style conveniences (``should_add_to_league`` takes a registry or a state).
    @property
    def checkpoints(self) -> list[AgentInfo]:
        return self.load().checkpoints

    @property
    def latest_step(self) -> int:
        return self.load().latest_step

    @property
    def best_elo(self) -> float:
        return self.load().best_elo

    # ----- internals ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A short poll interval: the critical section is milliseconds, and the default 50 ms
        # poll would make contended writers wait far longer than the work itself.
        lock = FileLock(self.lock_path, timeout=self.lock_timeout, poll_interval=0.002)
        try:
            lock.acquire()
        except Timeout:
            raise RegistryError(
                f"could not lock {self.lock_path} within {self.lock_timeout:.0f} s; "
                "another process holds it (a stuck writer?)"
            ) from None
        try:
            self._remove_stale_temp_files()
            yield
        finally:
            lock.release()

    def _remove_stale_temp_files(self) -> None:
        # Called with the lock held: every temp file of league.json is a killed writer's.
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def _read(self) -> LeagueState:
        if not self.path.exists():
            raise RegistryError(
                f"{self.path} does not exist; create the league first (LeagueRegistry.create)"
            )
        try:
            text = self.path.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RegistryError(
                f"{self.path} is unreadable ({err}); restore it from a backup — it is never "
                "reset automatically"
            ) from None
        return LeagueState.from_dict(data, source=str(self.path))

    def _write(self, state: LeagueState) -> None:
        atomic_write_json(self.path, state.to_dict())
