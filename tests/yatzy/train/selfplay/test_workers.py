from __future__ import annotations

import pytest

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.replay import games_on_disk
from leaguezero.common.config import load_config
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net
from leaguezero.yatzy.net.schema import checkpoint_schema, num_features
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.selfplay.workers import run_selfplay_workers, split_games


def test_split_games():
    assert split_games(10, 3) == [4, 3, 3] and sum(split_games(7, 7)) == 7


@pytest.mark.parametrize("kind", ["puct", "turn"])
def test_two_worker_processes_fill_one_iteration(tmp_path, kind):
    cfg = load_config(
        YatzyConfig,
        None,
        ["selfplay.workers=2", "mcts.budget_reroll=4", "mcts.budget_mark=2",
         "selfplay.shard_samples=64", "model.hidden=32", "model.blocks=0",
         f"search.kind={kind}"],
    )  # fmt: skip
    net = build_net(32, 0, num_features=num_features(kind))
    best = tmp_path / "best.pt"
    schema = checkpoint_schema(kind)
    save_checkpoint(best, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=schema)
    seen = []
    stats = run_selfplay_workers(
        cfg,
        best,
        tmp_path / "iter_0001",
        settings=SearchSettings.from_config(cfg),
        games=6,
        seed=3,
        progress=seen.append,
    )
    assert stats.games == 6 and sum(seen) == 6
    assert games_on_disk(tmp_path / "iter_0001", worker=0) == 3
    assert games_on_disk(tmp_path / "iter_0001", worker=1) == 3
