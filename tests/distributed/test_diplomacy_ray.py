"""Diplomacy league steps with rollouts and the evaluator as Ray tasks (the backends the command
line injects: ``RayTaskMap``, ``RayJobRunner``), on the session cluster: the same files as the
local backend, the very same games and update (same seeds), and a rollout worker killed
mid-game is retried without changing anything."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("diplomacy")
pytest.importorskip("ray")

from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.diplomacy.cli.train import make_trainer
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train.loop import TRAIN_STEP_EVENT, LeagueTrainer
from leaguezero.league.matchlog import read_matches

TINY = ["max_years=1", "train.group_size=2", "model.hidden=16", "model.layers=1",
        "league.eval_games=1", "league.bootstrap=0", "train.steps=2", "league.eval_every=2",
        "games_dir=null"]  # fmt: skip


def _kinds(run: Path) -> set[str]:
    return {re.sub(r"\d+", "N", str(p.relative_to(run))) for p in run.rglob("*") if p.is_file()}


def _rollout_workers() -> list[int]:
    """Ray worker processes running a rollout task now (Ray titles them
    ``ray::play_policy_game``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"ray::play_policy_game"):
                pids.append(int(entry))
    return pids


def _kill_one_rollout_worker(killed: list[int], stop: threading.Event) -> None:
    while not stop.is_set() and not killed:
        pids = _rollout_workers()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
        time.sleep(0.02)


def _train(run: Path, backend: str, **kwargs) -> LeagueTrainer:
    cfg = load_config(DiplomacyConfig, None, TINY)
    trainer = make_trainer(cfg, run, backend=backend, **kwargs)
    trainer.run()
    return trainer


def test_ray_league_steps_match_local_and_survive_a_killed_worker(ray_cluster, tmp_path):
    local_run, ray_run = tmp_path / "local", tmp_path / "ray"
    _train(local_run, "local")

    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_one_rollout_worker, args=(killed, stop), daemon=True)
    killer.start()
    try:
        _train(ray_run, "ray", ray_address=ray_cluster.get_runtime_context().gcs_address)
    finally:
        stop.set()
        killer.join(5)
    assert killed, "no rollout worker was running to be killed"

    assert _kinds(ray_run) == _kinds(local_run)
    # Same seeds, same games: the scores of every training game and the update agree.
    local_games = read_matches(local_run / "league_matches.ndjson", kind="training")
    ray_games = read_matches(ray_run / "league_matches.ndjson", kind="training")
    assert [g.participants for g in ray_games] == [g.participants for g in local_games]
    local_steps = read_events(local_run / "events.ndjson", TRAIN_STEP_EVENT)
    ray_steps = read_events(ray_run / "events.ndjson", TRAIN_STEP_EVENT)
    assert [s["score_mean"] for s in ray_steps] == [s["score_mean"] for s in local_steps]
    local_state = torch.load(local_run / "state.pt", weights_only=False)["policy"]
    ray_state = torch.load(ray_run / "state.pt", weights_only=False)["policy"]
    for key, value in local_state.items():
        torch.testing.assert_close(ray_state[key], value)
    # The step-2 evaluation ran as a Ray task and rated the challenger.
    rated = read_events(ray_run / "events.ndjson", "league.elo_updated")
    assert rated and rated[0]["challenger"] == "ckpt_000001"
    started = read_events(ray_run / "events.ndjson", "league.evaluation_started")
    assert started[0]["backend"] == "ray"


def test_llm_hero_on_ray_samples_on_the_shared_server(ray_cluster, tmp_path):
    """train.agent=llm with --backend ray: each game a Ray task whose seats sample on one
    `leaguezero llm serve`; the trainer publishes the hero version the tasks play."""
    pytest.importorskip("peft")
    from tests.diplomacy.tiny_lm import build_tiny_lm, start_llm_server

    lm = build_tiny_lm(tmp_path / "lm")
    proc, url = start_llm_server(lm)
    try:
        cfg = load_config(
            DiplomacyConfig,
            None,
            ["train.agent=llm", "llm.backend=openai", f"llm.base_model={lm}",
             f"llm.endpoint={url}", "llm.served_model_name=tiny", "llm.max_new_tokens=12",
             "llm.lora_rank=4", "llm.format_penalty=2.0", "max_years=1", "train.group_size=3",
             "train.steps=1", "league.eval_every=50", "games_dir=null"],
        )  # fmt: skip
        address = ray_cluster.get_runtime_context().gcs_address
        trainer = make_trainer(cfg, tmp_path / "run", backend="ray", ray_address=address)
        trainer.run()
        (step,) = read_events(tmp_path / "run" / "events.ndjson", TRAIN_STEP_EVENT)
        # Every hero completion of the three games came back from the workers.
        assert step["llm_completions"] >= 3 and step["llm_mean_tokens"] > 0
        assert len(read_matches(tmp_path / "run" / "league_matches.ndjson")) == 3
        from leaguezero.diplomacy.llm.remote.adapters import run_prefix

        prefix = run_prefix(tmp_path / "run")  # the run's own id, kept in its folder
        assert (tmp_path / "run" / "adapters" / f"{prefix}-v0001").is_dir()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
