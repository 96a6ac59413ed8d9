"""The append-only match log: one :class:`MatchResult` per NDJSON line.

The log is the league's source of truth for ratings: ``league.json`` holds the current ratings
for fast reads, but :func:`leaguezero.league.rating.fit_ratings` can recompute them from the
log at any time, so ratings survive restarts and do not depend on the order of updates.

Each line is ``{"schema_version": 1, "match_id": ..., "step": ..., "timestamp": ...,
"game": ..., "kind": ..., "participants": [{"agent", "seat", "score"}, ...], "meta": {...}}``.
Lines are appended with one ``write`` on a descriptor opened with ``O_APPEND``, so many
processes (trainer, evaluator, rollout workers) may append to one log without a lock. A writer
killed mid-line leaves a torn final line, which the reader skips.

The one exception to append-only is :meth:`MatchLog.drop`, used when a killed run resumes: the
training games of steps after the saved state are taken out (the resumed run plays those steps
again), by an atomic rewrite under the registry's writers' lock, the lock the evaluator also
appends under (:meth:`leaguezero.league.registry.LeagueRegistry.locked`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from leaguezero.common.atomic import atomic_write_text
from leaguezero.common.events import iter_ndjson
from leaguezero.common.safe_files import open_append
from leaguezero.league.types import MatchResult

MATCHLOG_SCHEMA_VERSION = 1


class MatchLogError(ValueError):
    """A match log that cannot be read (wrong schema version or a corrupt line)."""


def _corrupt(path: Path, lineno: int, err: json.JSONDecodeError) -> MatchLogError:
    return MatchLogError(
        f"{path}:{lineno}: corrupt match record ({err.msg}); remove or repair that line"
    )


def _stamp(result: MatchResult) -> MatchResult:
    # Fill the fields a caller may leave empty, so every stored line is complete.
    changes = {}
    if not result.timestamp:
        changes["timestamp"] = round(time.time(), 6)
    if not result.match_id:
        changes["match_id"] = uuid.uuid4().hex[:16]
    return dataclasses.replace(result, **changes) if changes else result


def encode_match(result: MatchResult) -> str:
    """One NDJSON line (with the trailing newline) for ``result``."""
    if len(result.participants) < 1:
        raise ValueError("a match needs at least one participant")
    record = {"schema_version": MATCHLOG_SCHEMA_VERSION, **result.to_dict()}
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


class MatchLog:
    """An append-only NDJSON file of match results (see the module docstring)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def append(self, result: MatchResult) -> MatchResult:
        """Append one result (filling ``timestamp``/``match_id`` when empty); returns it."""
        return self.extend([result])[0]

    def extend(self, results: Iterable[MatchResult]) -> list[MatchResult]:
        """Append several results, one ``write`` per line; returns them as stored."""
        stamped = [_stamp(r) for r in results]
        if not stamped:
            return stamped
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_append(self.path)  # no link followed, no FIFO or device written
        try:
            for result in stamped:
                # One write per line: O_APPEND makes each write land whole at the end of the
                # file even with other appenders, so lines never interleave.
                os.write(fd, encode_match(result).encode("utf-8"))
        finally:
            os.close(fd)
        return stamped

    def read(
        self,
        *,
        kind: str | None = None,
        min_step: int | None = None,
        max_step: int | None = None,
    ) -> list[MatchResult]:
        """All results in file order, optionally filtered by ``kind`` and step range.

        A missing file is an empty log. Raises :class:`MatchLogError` for a line with another
        schema version or a corrupt line that is not the (torn) last line.
        """
        return [
            result
            for _, result in self._records()
            if _selected(result, kind=kind, min_step=min_step, max_step=max_step)
        ]

    def _records(self) -> Iterator[tuple[int, MatchResult]]:
        for lineno, record in iter_ndjson(self.path, _corrupt):
            version = record.get("schema_version") if isinstance(record, dict) else None
            if version != MATCHLOG_SCHEMA_VERSION:
                raise MatchLogError(
                    f"{self.path}:{lineno}: match log schema_version {version!r}, this "
                    f"leaguezero reads {MATCHLOG_SCHEMA_VERSION}; use a matching version"
                )
            try:
                yield lineno, MatchResult.from_dict(record)
            except ValueError as err:
                raise MatchLogError(f"{self.path}:{lineno}: {err}") from None

    def drop(
        self,
        *,
        kind: str | None = None,
        min_step: int | None = None,
        max_step: int | None = None,
        where: Callable[[MatchResult], bool] | None = None,
    ) -> int:
        """Take the results :meth:`read` would return for these filters (and ``where``, when
        given, says True of) out of the log; returns how many.

        The file is rewritten atomically (the other lines byte for byte, a torn tail left out)
        and only when something is dropped. The caller holds the writers' lock
        (:meth:`~leaguezero.league.registry.LeagueRegistry.locked`): an append that came in
        between the read and the replace would be lost. Raises :class:`MatchLogError` like
        :meth:`read`.
        """
        records = dict(self._records())
        doomed = {
            n
            for n, result in records.items()
            if _selected(result, kind=kind, min_step=min_step, max_step=max_step)
            and (where is None or where(result))
        }
        if not doomed:
            return 0
        with self.path.open("r", encoding="utf-8") as f:  # split as iter_ndjson splits
            lines = f.readlines()
        kept = [
            line if line.endswith("\n") else line + "\n"
            for n, line in enumerate(lines, start=1)
            if n in records and n not in doomed
        ]
        atomic_write_text(self.path, "".join(kept))
        return len(doomed)

    def __len__(self) -> int:
        return len(self.read())


def _selected(
    result: MatchResult, *, kind: str | None, min_step: int | None, max_step: int | None
) -> bool:
    return (
        (kind is None or result.kind == kind)
        and (min_step is None or result.step >= min_step)
        and (max_step is None or result.step <= max_step)
    )


def append_matches(path: str | os.PathLike, results: Iterable[MatchResult]) -> list[MatchResult]:
    """Append ``results`` to the match log at ``path``; see :meth:`MatchLog.extend`."""
    return MatchLog(path).extend(results)


def read_matches(path: str | os.PathLike, **filters) -> list[MatchResult]:
    """Read the match log at ``path``; see :meth:`MatchLog.read`."""
    return MatchLog(path).read(**filters)
