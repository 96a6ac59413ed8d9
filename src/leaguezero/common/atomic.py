"""Atomic file writes: write a temp file in the same folder, fsync, then ``os.replace``.

A reader sees either the old file or the new one, never a torn write, and a process killed
mid-write leaves at most a stray ``.tmp`` file next to the target. :func:`atomic_folder` does
the same for a folder (a model or adapter folder written by another library).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (same-folder temp file + fsync + os.replace).

    ``mode`` sets the file's permissions (mkstemp would leave them owner-only).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_json(
    path: str | os.PathLike, obj: Any, *, indent: int | None = 2, mode: int = 0o644
) -> None:
    """Serialise ``obj`` as JSON and write it to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n", mode)


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not all filesystems allow opening a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, mode: int = 0o755):
    """Yield a temporary folder beside ``path``; when the block ends without an error it
    replaces ``path`` (renamed into place), otherwise it is removed and ``path`` is untouched."""
    folder = Path(path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        yield tmp
        os.chmod(tmp, mode)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
