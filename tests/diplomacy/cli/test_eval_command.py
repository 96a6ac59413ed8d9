"""`leaguezero diplomacy eval / bench / play` as a user runs them: one torch thread unless
told otherwise, progress lines on stderr when it is not a terminal, each game written to
``--results`` as it ends, and the LLM seats' own faults counted beside the engine's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diplomacy")

import torch
from typer.testing import CliRunner

from leaguezero.cli import app

runner = CliRunner()


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("command", ["eval", "bench", "play"])
def test_every_diplomacy_command_runs_one_torch_thread_by_default(
    command, restore_threads, tmp_path
):
    """A shared 2-core machine: torch's default of every core cost 12x the CPU of one thread
    for an LLM's generation; `yz` always set one, the Diplomacy commands did not."""
    args = {
        "eval": ["--hero", "greedy_bot", "--opponents", "random_bot", "--games", "1"],
        "bench": ["--hero", "greedy_bot", "--games", "1"],
        "play": ["--agents", ",".join(["random_bot"] * 7)],
    }[command]
    base = ["diplomacy", command, *args, "--set", "max_years=1", "--json"]
    if command != "bench":
        base.append("--no-save" if command == "eval" else f"--out-dir={tmp_path}")
    torch.set_num_threads(2)
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    result = runner.invoke(app, [*base, "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 2


def test_eval_reports_progress_and_writes_each_game_as_it_ends(tmp_path, restore_threads):
    results = tmp_path / "games.ndjson"
    args = [
        "diplomacy", "eval", "--hero", "greedy_bot", "--opponents", "random_bot", "--games",
        "3", "--set", "max_years=1", "--no-save", "--json", "--per-game", "--results",
        str(results),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # Not a terminal: plain lines on stderr (the first game and the last at least).
    assert "eval greedy_bot vs random_bot: 1/3 games" in result.stderr
    assert "3/3 games" in result.stderr and "left ~" in result.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [line["game_idx"] for line in lines] == [0, 1, 2]
    assert [line["centers"] for line in lines] == [g["centers"] for g in report["per_game"]]
    # Solo and most-centres shares beside the win share (the DipNet paper's 1-vs-6 columns).
    hero = report["hero"]
    assert 0 <= hero["solo_rate"] <= hero["most_centres_rate"] or hero["solo_rate"] == 0
    assert 0 <= hero["most_centres_rate"] <= 1


def test_eval_counts_an_llm_seats_own_faults(tmp_path, restore_threads):
    """A model that writes garbage: the tolerant parser hands the engine fewer (legal) orders,
    so the engine-side counts alone under-report; the LLM's own counts say what it wrote."""
    pytest.importorskip("peft")
    from tests.diplomacy.tiny_lm import build_tiny_lm

    model = build_tiny_lm(tmp_path / "tiny")
    args = [
        "diplomacy", "eval", "--hero", str(model), "--opponents", "random_bot", "--games", "1",
        "--set", "max_years=1", "--set", "llm.max_new_tokens=24", "--no-save", "--json",
        "--per-game",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    hero_llm = report["hero_llm"]
    assert hero_llm["answers"] >= 2  # spring and autumn orders
    assert hero_llm["invalid"] + hero_llm["missing"] > 0
    assert hero_llm["truncated"] == hero_llm["answers"]  # 24 tokens never reach END
    assert report["llm_missing_orders"] >= hero_llm["missing"]
    (game,) = report["per_game"]
    assert game["hero_llm_answers"] == hero_llm
    # The warning for a model never taught the answer format that writes free text.
    assert "llm.mode=constrained" in result.stderr


def test_concurrent_games_share_batches_reproducibly_and_play_the_same_games(
    tmp_path, restore_threads, monkeypatch
):
    """``--concurrent-games 3``: the LLM hero's rows of three games meet in one batch a phase
    (a Lockstep group), twice the same report, and in float32 the same games as in turn (each
    game's table is seeded by the game, not by which game asked first)."""
    pytest.importorskip("peft")
    from leaguezero.common import lockstep
    from tests.diplomacy.tiny_lm import build_tiny_lm

    model = build_tiny_lm(tmp_path / "tiny")
    sizes: list[int] = []
    call = lockstep.Lockstep.call

    def spy(self, number, rows, run):
        return call(self, number, rows, lambda batch: (sizes.append(len(batch)), run(batch))[1])

    monkeypatch.setattr(lockstep.Lockstep, "call", spy)

    def report(at_once: int) -> dict:
        args = [
            "diplomacy", "eval", "--hero", str(model), "--opponents", "random_bot",
            "--games", "4", "--set", "max_years=1", "--set", "llm.mode=constrained",
            "--set", "llm.max_new_tokens=48", "--no-save", "--json", "--per-game",
            "--concurrent-games", str(at_once),
        ]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        return {"hero": out["hero"], "games": [g["scores"] for g in out["per_game"]]}

    first, second = report(3), report(3)
    assert first == second
    assert max(sizes) > 1  # rows of different games shared a batch
    sizes.clear()
    assert report(1) == first  # float32 (the suite's pin): the same games
    assert not sizes  # in turn: no group
