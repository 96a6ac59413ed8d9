"""A step's games split between the trainer and a helper process (train.play_processes).

Real spawned processes on a tiny causal LM built in the test: a step played by two processes
trains exactly what the trainer alone trains (float32: a game's draws and numbers depend on its
seed only, not on which process or batch sampled it), the helper's weights folder is the live
hero's, a helper that cannot start is one clear error, and the setting with a server is said
and ignored.
"""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.common.events import read_events
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train.llm_hero import LanguageModelHero
from leaguezero.diplomacy.train.loop import LeagueTrainer, TrainError
from leaguezero.diplomacy.train.play_workers import PlayWorkerError, PlayWorkers, split_games
from tests.diplomacy.train.test_llm_train import _cfg as llm_cfg


def _cfg(tiny_lm, *extra: str) -> DiplomacyConfig:
    # test_llm_train's run, one step of two games (one for each process).
    return llm_cfg(tiny_lm, "train.group_size=2", "train.steps=1", "league.eval_every=50", *extra)


def test_split_games_gives_the_trainer_the_first_and_largest_share() -> None:
    assert split_games(4, 2) == [range(0, 2), range(2, 4)]
    assert split_games(5, 2) == [range(0, 3), range(3, 5)]
    assert split_games(4, 3) == [range(0, 2), range(2, 3), range(3, 4)]
    assert split_games(1, 2) == [range(0, 1)]  # no empty share for a helper
    assert split_games(3, 1) == [range(0, 3)]


def test_two_play_processes_play_and_train_what_one_does(tiny_lm, tmp_path, monkeypatch) -> None:
    played: dict[int, list] = {}
    play_group = LanguageModelHero.play_group

    def spy(self, *args, **kwargs):
        games = play_group(self, *args, **kwargs)
        played[self.play_processes] = games
        return games

    monkeypatch.setattr(LanguageModelHero, "play_group", spy)
    runs = {}
    for processes in (1, 2):
        run = tmp_path / f"p{processes}"
        LeagueTrainer(_cfg(tiny_lm, f"train.play_processes={processes}"), run).run()
        runs[processes] = run
        assert multiprocessing.active_children() == []  # the helper stopped with the run
    # The same games, the helper's second: seeds, scores and every record of the live hero.
    assert len(played[1]) == len(played[2]) == 2
    for one, two in zip(played[1], played[2], strict=True):
        assert (one.seed, one.scores) == (two.seed, two.scores)
        assert [(r.power, r.phase, r.payload.token_ids) for r in one.records] == [
            (r.power, r.phase, r.payload.token_ids) for r in two.records
        ]
        assert [r.old_log_prob for r in one.records] == pytest.approx(
            [r.old_log_prob for r in two.records], abs=1e-5
        )
    # So the step trained the same update (the adapter's start is seeded by run.seed; the
    # sampler's log-probs, batched otherwise, differ by float32 rounding).
    steps = {
        n: [e for e in read_events(run / "events.ndjson") if e["event"] == "diplomacy.train_step"]
        for n, run in runs.items()
    }
    for key in ("records", "records_played", "score_mean", "llm_completions"):
        assert steps[1][0][key] == steps[2][0][key], key
    # The step's event says what the helper used beside the trainer's own figures.
    assert "helper_cpu_seconds" not in steps[1][0]
    assert steps[2][0]["helper_cpu_seconds"] > 0 and steps[2][0]["helper_rss_mb"] > 0
    assert steps[1][0]["grad_norm"] == pytest.approx(steps[2][0]["grad_norm"], rel=1e-4)
    weights = {n: torch.load(r / "state.pt", weights_only=True)["policy"] for n, r in runs.items()}
    assert set(weights[1]) == set(weights[2])
    for name, tensor in weights[1].items():
        torch.testing.assert_close(tensor, weights[2][name], atol=1e-4, rtol=1e-3)
    # The helper loaded the live hero from a published folder; only the newest one is kept.
    published = list((runs[2] / "adapters").glob("*-play-v*"))
    assert len(published) == 1
    assert json.loads((published[0] / "adapter_config.json").read_text())["r"] == 4


def test_a_helper_that_cannot_load_its_model_is_one_line(tmp_path) -> None:
    llm = DiplomacyConfig().llm.model_copy(update={"base_model": str(tmp_path / "missing")})
    with pytest.raises(PlayWorkerError) as err:
        PlayWorkers(1, llm.model_dump_json(), threads=1, sampling_rows=4)
    message = str(err.value)
    assert "play helper 1" in message and "\n" not in message


def test_play_processes_with_a_server_are_said_and_ignored(tiny_lm, tmp_path, capsys) -> None:
    # The smol recipe sets 2; run against a server (llm.backend=openai) the games sample there.
    cfg = _cfg(tiny_lm, "train.play_processes=2", "llm.backend=openai")
    with pytest.raises(TrainError, match="cannot reach the LLM server"):
        LeagueTrainer(cfg, tmp_path / "run")
    assert "train.play_processes=2 is for the in-process sampler" in capsys.readouterr().err


def test_an_interrupted_share_leaves_the_helpers_to_close_not_to_wait_for(tiny_lm) -> None:
    # Ctrl-C or SIGTERM while the trainer plays its own share: the interruption goes up at once
    # (no wait for the helpers' games), the busy helpers refuse another job, and close() ends
    # them (terminated, not waited for, while a job may still run).
    workers = PlayWorkers(1, _cfg(tiny_lm).llm.model_dump_json(), threads=1, sampling_rows=4)
    try:

        def interrupted():
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            workers.play([object()], interrupted)  # any job: its answer is never read
        with pytest.raises(PlayWorkerError, match="interrupted in a job"):
            workers.play([object()], list)
    finally:
        workers.close()
    assert multiprocessing.active_children() == []
