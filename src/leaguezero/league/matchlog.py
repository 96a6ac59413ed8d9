"""The append-only match log: one :class:`MatchResult` per NDJSON line.

The log is the league's source of truth for ratings: ``league.json`` holds the current ratings
for fast reads, but :func:`leaguezero.league.rating.fit_ratings` can recompute them from the
log at any time, so ratings survive restarts and do not depend on the order of updates.

Each line is ``{"schema_version": 1, "match_id": ..., "step": ..., "timestamp": ...,
"game": ..., "kind": ..., "participants": [{"agent", "seat", "score"}, ...], "meta": {...}}``.
Lines are appended with one ``write`` on a descriptor opened with ``O_APPEND``, so many
processes (trainer, evaluator, rollout workers) may append to one log without a lock. A writer
killed mid-line leaves a torn final line, which the reader skips.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from leaguezero.common.events import iter_ndjson
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
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
        out: list[MatchResult] = []
        for lineno, record in iter_ndjson(self.path, _corrupt):
            version = record.get("schema_version") if isinstance(record, dict) else None
            if version != MATCHLOG_SCHEMA_VERSION:
                raise MatchLogError(
                    f"{self.path}:{lineno}: match log schema_version {version!r}, this "
                    f"leaguezero reads {MATCHLOG_SCHEMA_VERSION}; use a matching version"
                )
            try:
                result = MatchResult.from_dict(record)
            except ValueError as err:
                raise MatchLogError(f"{self.path}:{lineno}: {err}") from None
            if kind is not None and result.kind != kind:
                continue
            if min_step is not None and result.step < min_step:
                continue
            if max_step is not None and result.step > max_step:
                continue
            out.append(result)
        return out

    def __len__(self) -> int:
        return len(self.read())


def append_matches(path: str | os.PathLike, results: Iterable[MatchResult]) -> list[MatchResult]:
    """Append ``results`` to the match log at ``path``; see :meth:`MatchLog.extend`."""
    return MatchLog(path).extend(results)


def read_matches(path: str | os.PathLike, **filters) -> list[MatchResult]:
    """Read the match log at ``path``; see :meth:`MatchLog.read`."""
    return MatchLog(path).read(**filters)
