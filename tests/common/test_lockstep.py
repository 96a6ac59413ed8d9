"""Games in threads whose calls meet in one batch (common/lockstep.py): the batches are a
function of the games, not of the threads' timing; a game that finishes (or fails) without
asking never holds the others; an error in a batch reaches every game in it."""

from __future__ import annotations

import random
import threading
import time

import pytest

from leaguezero.common.lockstep import Lockstep, current


def _play(group: Lockstep, games: int, at_once: int, calls: dict[int, int], seed: int):
    """``games`` games in ``at_once`` threads (a pool's order), each asking ``calls[g]`` times
    with random pauses; returns the batches ``run`` saw and each game's answers."""
    batches: list[list[tuple[int, int]]] = []
    answers: dict[int, list] = {}
    rng = random.Random(seed)
    pauses = {g: [rng.random() * 0.01 for _ in range(calls[g])] for g in range(games)}
    queue = list(range(games))
    lock = threading.Lock()

    def run(rows):
        batches.append(list(rows))
        return [row[0] * 100 + row[1] for row in rows]

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                g = queue.pop(0)
            with group.game(g):
                assert current() == (group, g)
                got = []
                for k in range(calls[g]):
                    time.sleep(pauses[g][k])
                    got += group.call(g, [(g, k)], run)
                answers[g] = got

    threads = [threading.Thread(target=worker) for _ in range(at_once)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return batches, answers


def test_batches_follow_the_games_not_the_threads_timing() -> None:
    calls = {0: 3, 1: 0, 2: 5, 3: 2, 4: 4}  # game 1 never asks (a game of bots)
    runs = [_play(Lockstep(5, 3), 5, 3, calls, seed) for seed in range(4)]
    first_batches, first_answers = runs[0]
    for batches, answers in runs[1:]:
        assert answers == first_answers
        assert [sorted(b) for b in batches] == [sorted(b) for b in first_batches]
    for g, n in calls.items():
        assert first_answers[g] == [g * 100 + k for k in range(n)]
    assert max(len(b) for b in first_batches) == 3  # three games at once shared a batch
    for batch in first_batches:
        assert batch == sorted(batch)  # rows in game order


def test_an_error_reaches_every_game_of_its_batch_and_the_rest_go_on() -> None:
    group = Lockstep(2, 2)
    seen: list[str] = []

    def run(rows):
        if any(row == "bad" for row in rows):
            raise ValueError("boom")
        return rows

    def game(g: int, rows) -> None:
        with group.game(g):
            try:
                group.call(g, rows, run)
            except ValueError as err:
                seen.append(f"{g}:{err}")
            group.call(g, [f"again{g}"], lambda rows: rows)

    threads = [threading.Thread(target=game, args=(g, r)) for g, r in ((0, ["bad"]), (1, ["ok"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(seen) == ["0:boom", "1:boom"]
    assert group.batches == 2  # the failed batch and the one after it
    with pytest.raises(TypeError):
        group.call(0, None, run)  # a bad call fails at once, not after a wait
