"""Files and folders a command may trust: appended logs and per-user caches.

A command that appends to a path a user named (``--results``, ``--matchlog``, an event log)
must not follow a symbolic link someone planted in a shared folder (the line would land in the
link's target, any file the user can write), must not block forever on a FIFO nor write into
a device, and should find out before the work starts, not after. :func:`open_append` opens
with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a FIFO with no reader cannot hang the open) and
refuses anything but a regular file, checked on the open descriptor itself (no race between a
check and the open), and another uid's file in a folder others can write (planted, perhaps
with lines of its own).

A cache a process loads code or weights from must be the user's own: :func:`untrusted_reason`
says why a path is not (a link, another owner, writable by group or others).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path


class UnsafeFileError(ValueError):
    """A path a command refuses to write to or trust (the message is one line that names it)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_append(path: str | os.PathLike, mode: int = 0o644) -> int:
    """A descriptor appending to the regular file ``path`` (created if absent, its folder
    too), blocking as usual once open.

    Raises :class:`UnsafeFileError` when ``path`` is a symbolic link, a FIFO, a device, a
    socket or a folder, or another uid's file in a folder writable by group or others;
    ``OSError`` for the other reasons a file cannot be opened.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as err:
        # ELOOP: the last component is a link (O_NOFOLLOW); ENXIO: a FIFO nobody reads;
        # EISDIR: a folder. Say which from lstat rather than the bare errno.
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):
            try:
                kind = _kind(os.lstat(path).st_mode)
            except OSError:
                raise err from None
            raise UnsafeFileError(f"{path} is {kind}; {_ADVICE}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{path} is {_kind(st.st_mode)}; {_ADVICE}")
        if st.st_uid != os.geteuid() and os.stat(path.parent).st_mode & 0o022:
            # In a folder others can write, another's file may be planted, lines and all.
            raise UnsafeFileError(
                f"{path} belongs to uid {st.st_uid}, not you, in a folder others can write "
                "(it may be planted); give a path in a folder of your own"
            )
        flags_now = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags_now & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


_ADVICE = "only a regular file is appended to (no link is followed): give a plain file's path"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write part of it); ``OSError`` on a
    write error such as a full disk."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def untrusted_reason(path: str | os.PathLike, st: os.stat_result | None = None) -> str | None:
    """Why ``path`` is not the user's own (a symbolic link, owned by another uid, writable
    by group or others), or None when it is. ``st``: its ``lstat`` when the caller has it.
    ``OSError`` when it cannot be examined (e.g. it does not exist)."""
    st = os.lstat(path) if st is None else st
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not you (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by {_writers(st.st_mode)} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _writers(mode: int) -> str:
    both = (mode & 0o022) == 0o022
    return "group and others" if both else ("others" if mode & 0o002 else "its group")
