from __future__ import annotations

import json

import pytest

from leaguezero.yatzy.agents import GreedyAgent
from leaguezero.yatzy.play import parse_move, play_game


def test_parse_move():
    dice = [1, 3, 3, 5, 6]
    assert parse_move("keep 3 3", dice) == 0b01100
    assert parse_move("k 01100", dice) == 0b01100
    assert parse_move("keep 6 1", dice) == 0b10001
    assert parse_move("reroll", dice) == 0
    assert parse_move("mark pair", dice) == 32 + 6
    assert parse_move("m 14", dice) == 32 + 14
    for bad in ["keep 4", "mark nothing", "dance", ""]:
        with pytest.raises(ValueError):
            parse_move(bad, dice)


def test_a_scripted_person_plays_a_whole_game_with_verdicts():
    said: list[str] = []
    moves = iter(["hint", "keep 7", "keep 1 1 1 1 1 1"] + [f"mark {c}" for c in range(15)] * 3)

    def ask(_prompt: str) -> str:
        return next(moves)

    from leaguezero.yatzy.oracle import load_oracle

    mine, theirs = play_game(GreedyAgent(), 5, 1, ask, said.append, load_oracle())
    text = "\n".join(said)
    assert "oracle's best options" in text and "oracle:" in text
    assert "no unused die showing 7" in text
    assert mine >= 0 and theirs > 0 and "score" in said[-1]


def test_profile_selfplay_writes_reports(tmp_path):
    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.common.config import load_config
    from leaguezero.yatzy.config import YatzyConfig
    from leaguezero.yatzy.net import build_net
    from leaguezero.yatzy.profiling import profile_selfplay

    cfg = load_config(
        YatzyConfig, None, ["mcts.budget_reroll=4", "mcts.budget_mark=2",
                            "selfplay.concurrent_games=4", "search.kind=puct"],
    )  # fmt: skip
    evaluator = TorchEvaluator(build_net(32, 0), 1)
    summary = profile_selfplay(cfg, evaluator, tmp_path / "profile", games=4, seed=0)
    assert 0 < summary["network_share"] < 1
    for name in ("selfplay.prof", "selfplay_top.txt", "torch_trace.json", "summary.json"):
        assert (tmp_path / "profile" / name).exists()
    assert json.loads((tmp_path / "profile" / "summary.json").read_text())["games"] == 4
    assert "run_selfplay" in (tmp_path / "profile" / "selfplay_top.txt").read_text()
