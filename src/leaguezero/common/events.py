"""Append-only NDJSON event logs.

Each line is one JSON object ``{"ts": <unix seconds>, "event": <name>, ...fields}``. Lines are
written with a single ``write`` on a file opened with ``O_APPEND`` and flushed at once, so several
processes may append to one file and a reader may ``tail -f`` it. The reader skips a torn last
line (a writer killed mid-line) instead of failing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from leaguezero.common.safe_files import open_append


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; null is what a reader can handle.
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class EventWriter:
    """Appends events to an NDJSON file; one ``write`` per line, flushed per line."""

    def __init__(self, path: str | os.PathLike, **static_fields: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._static = static_fields
        self._fd = open_append(self.path)  # no link followed, no FIFO or device written

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event and return the record written."""
        record = {"ts": round(time.time(), 6), "event": event, **self._static, **fields}
        line = json.dumps(_jsonable(record), separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode("utf-8"))
        return record

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class CorruptLogError(ValueError):
    """A line of an append-only NDJSON log that is not JSON (the message names file and line)."""


def iter_ndjson(
    path: str | os.PathLike,
    corrupt: Callable[[Path, int, json.JSONDecodeError], Exception] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, record)`` for every non-blank line of an NDJSON file, in order.

    The one reader of the append-only NDJSON files (events, the league match log): a missing
    file is empty; a torn final line (a writer killed mid-write: no newline, not JSON) is
    skipped; any other line that is not JSON raises ``corrupt(path, lineno, error)`` (default:
    :class:`CorruptLogError` naming the line).
    """
    path = Path(path)
    if not path.exists():
        return
    with path.open("r", encoding="utf-8") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines) and not line.endswith("\n"):
                return  # torn tail
            if corrupt is not None:
                raise corrupt(path, lineno, err) from None
            raise CorruptLogError(f"{path}:{lineno}: not a JSON object ({err})") from None
        yield lineno, record


def iter_events(path: str | os.PathLike, event: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield the events of an NDJSON file in order, optionally only those named ``event``
    (torn tail and malformed lines as in :func:`iter_ndjson`)."""
    for _, record in iter_ndjson(path):
        if event is None or record.get("event") == event:
            yield record


def read_events(path: str | os.PathLike, event: str | None = None) -> list[dict[str, Any]]:
    """All events of an NDJSON file (see :func:`iter_events`)."""
    return list(iter_events(path, event))
