"""open_append refuses links, FIFOs and devices at once (no blocking, no write into a link's
target), and untrusted_reason says why a path is not the user's own."""

from __future__ import annotations

import os
import stat

import pytest

from leaguezero.common.safe_files import (
    UnsafeFileError,
    open_append,
    untrusted_reason,
    write_all,
)


def test_a_regular_file_is_created_and_appended_to(tmp_path):
    path = tmp_path / "sub" / "log.ndjson"
    for line in (b"one\n", b"two\n"):
        fd = open_append(path)
        write_all(fd, line)
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    fd = open_append(path)
    try:  # blocking again once open (O_NONBLOCK is only for the open itself)
        assert os.get_blocking(fd)
    finally:
        os.close(fd)


def test_a_planted_symlink_is_not_followed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (shared / "results.ndjson").symlink_to(victim)
    (shared / "dangling.ndjson").symlink_to(tmp_path / "absent")
    for name in ("results.ndjson", "dangling.ndjson"):
        with pytest.raises(UnsafeFileError, match="is a symbolic link; only a regular file"):
            open_append(shared / name)
    assert victim.read_text() == "precious\n" and not (tmp_path / "absent").exists()
    if os.geteuid() != 0:
        return  # planting a file as another uid needs chown
    planted = shared / "planted.ndjson"
    planted.write_text('{"fake": "game"}\n')
    os.chown(planted, 54321, 54321)
    with pytest.raises(UnsafeFileError, match="belongs to uid 54321, not you, in a folder"):
        open_append(planted)
    os.chmod(shared, 0o755)  # the user's own folder: another's file there is the user's call
    os.close(open_append(planted))


def test_fifos_devices_and_folders_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="FIFO"):  # no reader: before, blocked forever
        open_append(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UnsafeFileError, match="FIFO"):  # with one: still no FIFO written
            open_append(fifo)
    finally:
        os.close(reader)
    with pytest.raises(UnsafeFileError, match="a character device"):
        open_append("/dev/full")
    with pytest.raises(UnsafeFileError, match="a folder"):
        open_append(tmp_path)


def test_untrusted_reason_names_links_owners_and_loose_modes(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    assert untrusted_reason(mine) is None
    os.chmod(mine, 0o775)
    assert untrusted_reason(mine) == "is writable by its group (mode 775)"
    os.chmod(mine, 0o1777)
    assert untrusted_reason(mine) == "is writable by group and others (mode 1777)"
    link = tmp_path / "link"
    link.symlink_to(mine)
    assert untrusted_reason(link) == "is a symbolic link"
    assert untrusted_reason(link, os.stat(link)) is not None  # followed: the folder's mode
    if os.geteuid() == 0:
        os.chmod(mine, 0o755)
        os.chown(mine, 54321, 54321)
        assert untrusted_reason(mine).startswith("belongs to uid 54321, not you")
    assert stat.S_ISDIR(os.stat(mine).st_mode)
