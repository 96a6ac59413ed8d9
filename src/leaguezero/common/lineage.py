"""Reading a run's ``lineage.json`` (where it started), shared by Yatzy and Diplomacy runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_lineage_record(path: Path, version: int, error: type[Exception]) -> dict[str, Any] | None:
    """The lineage record at ``path`` (None when there is none: a run from fresh weights).

    A damaged file or another ``schema_version`` than ``version`` raises ``error`` with one line.
    """
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise error(f"{path} is damaged ({str(err).splitlines()[0]})") from None
    if not isinstance(record, dict) or record.get("schema_version") != version:
        found = record.get("schema_version") if isinstance(record, dict) else None
        raise error(f"{path}: lineage schema {found!r}, this version reads {version}")
    return record
