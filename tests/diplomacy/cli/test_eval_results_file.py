"""``diplomacy eval --results FILE`` (issue 54 item 8): a FIFO, a device or a symbolic link is
refused in one line before the first game; a write that fails later keeps the games (their
lines on stderr after the report, one line saying so, status 1)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

from typer.testing import CliRunner

from leaguezero.cli import app

TINY = ["--hero", "random_bot", "--opponents", "random_bot", "--games", "1"]
TINY += ["--set", "max_years=1", "--no-save", "--json"]


def _eval(*args: str, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", "diplomacy", "eval", *TINY, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=preexec_fn,
        timeout=600,  # a hang guard only: before, the FIFO blocked forever
    )


def test_a_fifo_is_refused_in_one_line_before_the_first_game(tmp_path):
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)
    proc = _eval("--results", str(fifo))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"--results {fifo} is a FIFO (named pipe); only a regular file is appended to (no link "
        "is followed): give a plain file's path"
    ]


def test_a_symlink_planted_in_a_shared_folder_is_not_followed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (shared / "games.ndjson").symlink_to(victim)
    proc = _eval("--results", str(shared / "games.ndjson"))
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "games," not in proc.stderr
    assert victim.read_text() == "precious\n"  # before: the game's line appended here


def test_devices_and_a_matchlog_fifo_are_refused_before_the_games(tmp_path):
    fifo = tmp_path / "matches.fifo"
    os.mkfifo(fifo)
    for args, what in (
        (["--results", "/dev/full"], "--results /dev/full is a character device"),
        (["--matchlog", str(fifo)], f"--matchlog {fifo} is a FIFO"),
    ):
        result = CliRunner().invoke(app, ["diplomacy", "eval", *TINY, *args])
        assert isinstance(result.exception, SystemExit) and result.exit_code == 2
        assert result.output.strip().startswith(what) and "1/1 games" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_write_error_keeps_the_games_on_stderr_in_one_line(tmp_path):
    results = tmp_path / "games.ndjson"
    results.write_text("x" * 63 + "\n")

    def full_disk() -> None:  # the file may not grow past its 64 bytes: EFBIG, like ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    proc = _eval("--results", str(results), "--per-game", preexec_fn=full_disk)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and results.read_text() == "x" * 63 + "\n"
    report = json.loads(proc.stdout)  # the report still printed
    assert report["games"] == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == (
        f"--results {results}: 1 of 1 game lines were not written (File too large); they are "
        "the JSON lines printed on stderr above"
    )
    kept = json.loads(lines[-2])  # the game's own line, as the file would have held it
    assert kept["game_idx"] == 0 and kept["final_year"] == report["per_game"][0]["final_year"]
    assert sum(line.startswith("warning: --results") for line in lines) == 1
