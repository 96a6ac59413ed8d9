from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.events import EventWriter, read_events


def test_events_have_ts_event_and_fields(tmp_path):
    path = tmp_path / "log.ndjson"
    with EventWriter(path, run="r1") as log:
        log.emit("iteration", loss=np.float32(0.5), visits=np.array([1, 2]), bad=float("nan"))
        log.emit("other", n=1)
    events = read_events(path)
    assert [e["event"] for e in events] == ["iteration", "other"]
    assert events[0]["run"] == "r1" and events[0]["loss"] == 0.5
    assert events[0]["visits"] == [1, 2] and events[0]["bad"] is None
    assert isinstance(events[0]["ts"], float)
    assert read_events(path, "other") == [events[1]]


def test_each_line_is_visible_at_once(tmp_path):
    path = tmp_path / "log.ndjson"
    log = EventWriter(path)
    log.emit("a")
    assert len(read_events(path)) == 1  # no buffering: a tail sees it now
    log.close()


def test_torn_last_line_is_skipped_but_corruption_is_reported(tmp_path):
    path = tmp_path / "log.ndjson"
    EventWriter(path).emit("a")
    with path.open("a") as f:
        f.write('{"ts": 1, "event": "tor')
    assert [e["event"] for e in read_events(path)] == ["a"]
    path.write_text('{"event": "a"}\nnot json\n{"event": "b"}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_events(path)


def _writer(path, n):
    log = EventWriter(path, pid=os.getpid())
    for i in range(n):
        log.emit("tick", i=i, pad="x" * 200)


def test_concurrent_appends_do_not_interleave(tmp_path):
    path = tmp_path / "log.ndjson"
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, 200)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    events = read_events(path)
    assert len(events) == 800
    for pid in {e["pid"] for e in events}:
        assert [e["i"] for e in events if e["pid"] == pid] == list(range(200))


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "sub" / "x.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"a": 2})
    assert path.read_text().strip().replace(" ", "").replace("\n", "") == '{"a":2}'
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temp files left
