from __future__ import annotations

import json

import pytest

from leaguezero.yatzy.agents.base import GreedyAgent
from leaguezero.yatzy.agents.play import parse_move, play_game
from leaguezero.yatzy.game.tables import CATEGORIES


def test_parse_move():
    dice = [1, 3, 3, 5, 6]
    assert parse_move("keep 3 3", dice) == 0b01100
    assert parse_move("k 01100", dice) == 0b01100
    assert parse_move("keep 6 1", dice) == 0b10001
    assert parse_move("reroll", dice) == 0
    assert parse_move("mark pair", dice) == 32 + 6
    assert parse_move("m yatzy", dice) == 32 + 14
    # Issue 40: a box by its name, the start of one, or a face; never an ambiguous number.
    assert parse_move("mark 6", dice) == 32 + 5  # sixes, not pair (index 6)
    assert parse_move("mark 1", dice) == 32 + 0
    assert parse_move("mark sm", dice) == 32 + 10  # small_straight
    assert parse_move("mark two pairs", dice) == 32 + 7
    for bad in ["keep 4", "mark nothing", "dance", "", "mark 14", "mark t", "mark"]:
        with pytest.raises(ValueError):
            parse_move(bad, dice)


def test_a_scripted_person_plays_a_whole_game_with_verdicts():
    said: list[str] = []
    boxes = [f"mark {box}" for box in CATEGORIES]
    moves = iter(["hint", "keep 7", "keep 1 1 1 1 1 1", "mark t"] + boxes * 3)

    def ask(_prompt: str) -> str:
        return next(moves)

    from leaguezero.yatzy.oracle.solver import load_oracle

    mine, theirs = play_game(GreedyAgent(), 5, 1, ask, said.append, load_oracle())
    text = "\n".join(said)
    assert "oracle's best options" in text and "oracle:" in text
    assert "no unused die showing 7" in text
    assert "mark t: which one? twos, threes, two_pairs, three_kind" in text
    assert "you rolled " in text and ", scored " in text  # says which box it marked
    assert "upper bonus" in text
    assert mine >= 0 and theirs > 0 and "score" in said[-1]


def test_profile_selfplay_writes_reports(tmp_path):
    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.common.config import load_config
    from leaguezero.yatzy.config import YatzyConfig
    from leaguezero.yatzy.net.networks import build_net
    from leaguezero.yatzy.search.settings import SearchSettings
    from leaguezero.yatzy.train.profiling import profile_selfplay

    cfg = load_config(
        YatzyConfig, None, ["mcts.budget_reroll=4", "mcts.budget_mark=2",
                            "selfplay.concurrent_games=4", "search.kind=puct"],
    )  # fmt: skip
    evaluator = TorchEvaluator(build_net(32, 0), 1)
    settings = SearchSettings.from_config(cfg)
    summary = profile_selfplay(cfg, settings, evaluator, tmp_path / "profile", games=4, seed=0)
    assert 0 < summary["network_share"] < 1
    for name in ("selfplay.prof", "selfplay_top.txt", "torch_trace.json", "summary.json"):
        assert (tmp_path / "profile" / name).exists()
    assert json.loads((tmp_path / "profile" / "summary.json").read_text())["games"] == 4
    assert "run_selfplay" in (tmp_path / "profile" / "selfplay_top.txt").read_text()


def test_yz_play_screen_reads_like_a_score_card(tmp_path):
    """Issue 16 item 10, through the CLI: the agent's rolls and choices in words, points in
    filled boxes, a labelled column for the current dice, `help`, the hint as expected final
    scores, no literal backticks, and a clear message for a missing checkpoint."""
    from typer.testing import CliRunner

    from leaguezero.cli import app

    runner = CliRunner()
    moves = "help\nhint\nmark chance\n" + "mark ones\n" * 2 + "quit\n"
    result = runner.invoke(app, ["yatzy", "play", "--agent", "greedy", "--seat", "1"], input=moves)
    out = result.output
    assert result.exit_code == 1 and "game abandoned" in out  # quit mid-game
    assert "`" not in out
    assert "agent rolled " in out and ("kept " in out or "scored " in out)
    assert "your dice would score" in out
    assert "hint           the oracle's best options" in out  # help lists the commands
    assert "expected final score" in out
    chance_row = [line for line in out.splitlines() if line.split()[:1] == ["chance"]][-1]
    assert chance_row.split()[2].isdigit()  # your filled box shows its points, not x
    assert "you rolled " in out and "scored " in out and " in chance" in out
    missing = runner.invoke(app, ["yatzy", "play", "--agent", str(tmp_path / "nope.pt")])
    assert missing.exit_code == 2 and "checkpoint file" in missing.output
    assert "does not exist" in missing.output and "unknown agent" not in missing.output
    shipped = runner.invoke(app, ["yatzy", "play", "--agent", "pretrained", "--no-oracle"],
                            input="quit\n")  # fmt: skip
    assert "you play pretrained;" in shipped.output  # its name, not the shipped file's path
    no_oracle = runner.invoke(app, ["yatzy", "play", "--no-oracle"], input="hint\nquit\n")
    assert "no oracle loaded" in no_oracle.output
