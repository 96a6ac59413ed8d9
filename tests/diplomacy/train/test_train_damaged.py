"""A damaged run directory gives `diplomacy train --resume` and `train-report` one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.diplomacy.train.test_train import _train
from tests.in_process import Ran, here

pytest.importorskip("diplomacy")


def _cli(*args: str) -> Ran:
    """``leaguezero diplomacy ARGS`` in this process (the refusals come before any work)."""
    return here("diplomacy", *args)


def _assert_one_line(result: Ran, needle: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("damaged") / "run"
    proc = _train(run, "train.steps=1")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return run


@pytest.mark.parametrize(
    "content",
    [b"garbage{", b"", b'{"schema_version": 1, "agents": {', b'{"schema_version": 1, "agents": []}',
     b'{"schema_version": 99, "agents": {}}'],
    ids=["garbage", "empty", "truncated", "agents-list", "schema-99"],
)  # fmt: skip
def test_resume_with_a_damaged_league_json_is_one_line(trained, tmp_path, content) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "league.json").write_bytes(content)
    args = ["train", "--out", str(run), "--resume", "--quiet", "--set", "train.steps=2"]
    _assert_one_line(_cli(*args), "league.json")


def test_a_garbage_line_in_the_logs_is_one_line_naming_it(trained, tmp_path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    with open(run / "events.ndjson", "a") as fh:
        fh.write("not json\n" + json.dumps({"event": "x"}) + "\n")
    _assert_one_line(_cli("train-report", str(run)), "events.ndjson:")
    args = ["train", "--out", str(run), "--resume", "--quiet", "--set", "train.steps=2"]
    _assert_one_line(_cli(*args), "events.ndjson:")
    shutil.copy(trained / "events.ndjson", run / "events.ndjson")
    with open(run / "league_matches.ndjson", "a") as fh:
        fh.write("not json\n" + json.dumps({"x": 1}) + "\n")
    _assert_one_line(_cli(*args), "league_matches.ndjson")
