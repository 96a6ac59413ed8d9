"""Yatzy self-play as Ray actors on a real local cluster: shards, stats, and a killed worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.replay import complete_shards, games_on_disk, read_shard
from leaguezero.common.config import load_config
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net
from leaguezero.yatzy.net.schema import checkpoint_schema, num_features
from leaguezero.yatzy.train.kinds import shard_schema
from leaguezero.yatzy.train.selfplay.puct import SHARD_SCHEMA

pytest.importorskip("ray")

TINY = ["mcts.budget_reroll=4", "mcts.budget_mark=2", "model.hidden=32", "model.blocks=0",
        "selfplay.workers=2", "run.backend=ray", "selfplay.root_log_rate=0",
        "search.kind=puct"]  # fmt: skip


def _best(tmp_path, kind: str = "puct"):
    net = build_net(32, 0, num_features=num_features(kind))
    path = tmp_path / "best.pt"
    schema = checkpoint_schema(kind)
    save_checkpoint(path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=schema)
    return path


def _compile_here(cfg: YatzyConfig, best, tmp_path) -> None:
    """One game of the actors' code in this process, so numba compiles the search once and
    caches it beside the sources: the actors (and a restarted one) load it instead of each
    compiling it (tens of CPU-seconds each on a fresh checkout, and a stepped actor compiles
    in 50 ms slices)."""
    from leaguezero.yatzy.cli.ray_backend import SelfPlayWorker
    from leaguezero.yatzy.search.settings import SearchSettings

    settings = SearchSettings.from_config(cfg).to_dict()
    worker = SelfPlayWorker(cfg.model_dump_json(), 0)
    worker.play(settings, str(best), str(tmp_path / "compile"), 1, 0, None, None)


@pytest.mark.parametrize("kind", ["puct", "turn"])
def test_two_ray_actors_fill_one_iteration(ray_cluster, tmp_path, kind):
    from leaguezero.yatzy.cli.ray_backend import run_selfplay_ray

    cfg = load_config(
        YatzyConfig, None, [*TINY, "selfplay.shard_samples=64", f"search.kind={kind}"]
    )
    seen: list[int] = []
    out = tmp_path / "iter_0001"
    best = _best(tmp_path, kind)
    _compile_here(cfg, best, tmp_path)
    stats = run_selfplay_ray(cfg, best, out, games=6, seed=3, progress=seen.append)
    assert stats.games == 6 and sum(seen) == 6 and stats.decisions_per_s > 0
    assert games_on_disk(out, worker=0) == 3 and games_on_disk(out, worker=1) == 3
    for shard in complete_shards(out):
        assert len(read_shard(shard, shard_schema(kind))) > 0


# Three actor starts (each imports torch; the search is compiled once, here, before them) and
# the stepped worker: its own deadlines (600 s for the actors, 1,200 for the stepping) are longer
# than the suite's default 600 s, which a run beside two busy cores once exceeded (when each
# actor compiled the search itself: 671 s under load, ~50-75 s since).
@pytest.mark.timeout(2400)
def test_killed_actor_is_restarted_and_no_game_is_lost(ray_cluster, tmp_path):
    from leaguezero.yatzy.cli.ray_backend import RaySelfPlay

    # One game at a time and a shard per game, so the kill lands between shards of worker 0.
    cfg = load_config(
        YatzyConfig, None, [*TINY, "selfplay.concurrent_games=1", "selfplay.shard_samples=1"]
    )
    out = tmp_path / "iter_0001"
    per_worker = 200  # far more than worker 0 plays in one of the short runs below
    best = _best(tmp_path)
    _compile_here(cfg, best, tmp_path)
    phase = RaySelfPlay(cfg, best, out, games=2 * per_worker, seed=5)
    phase.start()
    try:
        victim = phase.worker_pids(timeout_s=600)[0]  # actors import torch: slow under load
        # Worker 0 runs only in short steps between SIGCONT and SIGSTOP, so the kill lands
        # in the middle of its games however the machine schedules the test (no race with a
        # worker that finishes while this process waits for the CPU). A step of 50 ms of wall
        # time is at most 50 ms of the worker's CPU: a few dozen tiny games of its 200, while
        # its start (imports, compiling the search) takes a few hundred steps.
        os.kill(victim, signal.SIGSTOP)
        deadline = time.monotonic() + 1200
        while games_on_disk(out, worker=0) < 2 and time.monotonic() < deadline:
            os.kill(victim, signal.SIGCONT)
            time.sleep(0.05)
            os.kill(victim, signal.SIGSTOP)
        at_kill = games_on_disk(out, worker=0)  # frozen: nothing moves until the kill
        os.kill(victim, signal.SIGKILL)
        assert 0 < at_kill < per_worker, "the kill should land in the middle of worker 0's games"
        stats = phase.wait()
    finally:
        phase.shutdown()
    # The actor came back in a new process and resumed from its complete shards.
    assert games_on_disk(out, worker=0) == per_worker
    assert games_on_disk(out, worker=1) == per_worker
    assert stats.games == 2 * per_worker
    games_per_shard = [
        read_shard(s, SHARD_SCHEMA) for s in complete_shards(out) if "_w00_" in s.name
    ]
    # One shard per game: none replayed twice, none missing.
    assert len(games_per_shard) == per_worker
