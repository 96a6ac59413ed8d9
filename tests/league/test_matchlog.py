from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp

import pytest

from leaguezero.league.matchlog import (
    MATCHLOG_SCHEMA_VERSION,
    MatchLog,
    MatchLogError,
    append_matches,
    read_matches,
)
from leaguezero.league.types import MatchResult, Participant


def _match(a: str, b: str, score_a: float, score_b: float, step: int = 0) -> MatchResult:
    return MatchResult(
        participants=(Participant(a, 0, score_a), Participant(b, 1, score_b)),
        step=step,
        game="test",
    )


def test_round_trip_fills_id_and_timestamp(tmp_path):
    log = MatchLog(tmp_path / "matches.ndjson")
    assert log.read() == []
    stored = log.append(_match("hero", "random", 250.0, 180.0, step=7))
    assert stored.match_id and stored.timestamp > 0
    (back,) = log.read()
    assert back == stored
    assert back.scores_by_agent() == {"hero": 250.0, "random": 180.0}
    line = json.loads((tmp_path / "matches.ndjson").read_text().splitlines()[0])
    assert line["schema_version"] == MATCHLOG_SCHEMA_VERSION


def test_filters_by_kind_and_step(tmp_path):
    path = tmp_path / "m.ndjson"
    append_matches(path, [_match("a", "b", 1, 0, step=s) for s in range(10)])
    append_matches(
        path,
        [
            MatchResult(
                participants=(Participant("a", 0, 1.0), Participant("b", 1, 0.0)),
                kind="training",
                step=3,
            )
        ],
    )
    assert len(read_matches(path)) == 11
    assert len(read_matches(path, kind="training")) == 1
    assert [m.step for m in read_matches(path, kind="evaluation", min_step=4, max_step=6)] == [
        4,
        5,
        6,
    ]


def test_torn_tail_is_skipped_but_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "m.ndjson"
    append_matches(path, [_match("a", "b", 1, 0), _match("a", "b", 0, 1)])
    with path.open("a") as f:
        f.write('{"schema_version": 1, "participants": [{"agent"')  # killed mid-line
    assert len(read_matches(path)) == 2
    with path.open("a") as f:
        f.write("\n")
    append_matches(path, [_match("a", "b", 1, 1)])
    with pytest.raises(MatchLogError, match=r"m\.ndjson:3: corrupt match record"):
        read_matches(path)


def test_wrong_schema_version_is_a_clear_error(tmp_path):
    path = tmp_path / "m.ndjson"
    append_matches(path, [_match("a", "b", 1, 0)])
    record = json.loads(path.read_text())
    record["schema_version"] = 99
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(MatchLogError, match="schema_version 99"):
        read_matches(path)


def test_pairwise_outcomes_skip_clones_and_scale_by_seats():
    seats = ["hero", "A", "A", "A", "B", "B", "B"]
    scores = [5.0, 3.0, 3.0, 1.0, 4.0, 0.0, 3.0]
    match = MatchResult(
        participants=tuple(
            Participant(a, i, s) for i, (a, s) in enumerate(zip(seats, scores, strict=True))
        )
    )
    pairs = list(match.pairwise_outcomes())
    # 21 seat pairs minus 3 + 3 clone pairs.
    assert len(pairs) == 15
    assert all(w == pytest.approx(1 / 6) for *_, w in pairs)
    hero_pairs = [p for p in pairs if p[0] == "hero"]
    assert [p[2] for p in hero_pairs] == [1.0] * 6
    a_vs_b = [(p[2]) for p in pairs if p[0] == "A" and p[1] == "B"]
    # A seats 3,3,1 against B seats 4,0,3.
    assert sorted(a_vs_b) == sorted([0, 1, 0.5, 0, 1, 0.5, 0, 1, 0])


def _append_worker(path: str, worker: int, count: int) -> None:
    log = MatchLog(path)
    for i in range(count):
        log.append(_match(f"w{worker}", "base", float(i), 0.0, step=i))


def test_many_processes_append_without_losing_or_interleaving_lines(tmp_path):
    path = str(tmp_path / "m.ndjson")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append_worker, args=(path, w, 100)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    results = read_matches(path)
    assert len(results) == 400
    for w in range(4):
        steps = [m.step for m in results if m.participants[0].agent == f"w{w}"]
        assert steps == list(range(100))


def test_drop_takes_out_what_read_would_return_and_keeps_the_rest_byte_for_byte(tmp_path):
    path = tmp_path / "m.ndjson"
    log = MatchLog(path)
    log.extend([_match("a", "b", 1, 0, step=s) for s in range(1, 4)])
    training = [
        dataclasses.replace(_match("h", "b", 1, 0, step=s), kind="training") for s in (2, 3, 3)
    ]
    log.extend(training)
    before = path.read_bytes()
    assert log.drop(kind="training", min_step=4) == 0  # nothing to drop: no rewrite
    assert path.read_bytes() == before
    with path.open("a") as f:
        f.write('{"schema_version": 1, "partic')  # a torn tail goes with the rewrite
    assert log.drop(kind="training", min_step=3) == 2
    kept = [line + "\n" for line in before.decode().splitlines()]
    assert path.read_text() == "".join(kept[:4])
    assert [(m.kind, m.step) for m in log.read()] == [
        ("evaluation", 1),
        ("evaluation", 2),
        ("evaluation", 3),
        ("training", 2),
    ]
