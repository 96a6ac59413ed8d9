"""The league loop end to end at tiny sizes: files, events, evaluator, and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("diplomacy")

from leaguezero.common.events import read_events
from leaguezero.diplomacy.train.league_eval import BASELINES
from leaguezero.diplomacy.train.loop import STATE_FORMAT, TRAIN_STEP_EVENT
from leaguezero.diplomacy.train.report import summarize_run
from leaguezero.league.registry import LeagueRegistry

TINY = [
    "max_years=1",
    "train.group_size=2",
    "model.hidden=16",
    "model.layers=1",
    "league.eval_games=1",
    "league.bootstrap=0",
]


def _train(run_dir: Path, *extra: str, resume: bool = False) -> subprocess.Popen:
    args = [sys.executable, "-m", "leaguezero", "diplomacy", "train", "--out", str(run_dir)]
    for item in [*TINY, *extra]:
        args += ["--set", item]
    if resume:
        args.append("--resume")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*args, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _saved_step(run_dir: Path) -> int:
    try:
        return int(torch.load(run_dir / "state.pt", weights_only=True)["step"])
    except Exception:  # not written yet, or being replaced right now
        return 0


def test_three_steps_write_registry_checkpoints_events_and_an_evaluation(tmp_path) -> None:
    run = tmp_path / "run"
    proc = _train(run, "train.steps=3", "league.eval_every=2")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["step"] == 3

    state = LeagueRegistry(run / "league.json").load()
    assert {"base_model", "random_bot", "chaos_bot", "dumb_bot", "ckpt_000001"} <= set(state.agents)
    assert state.agents["ckpt_000001"].parent == "base_model"
    assert (run / "checkpoints" / "ckpt_000001.pt").exists()
    assert (run / "checkpoints" / "base_model.pt").exists()
    # The last step's hero is kept whatever the schedule kept: the live weights, with lineage.
    final = torch.load(run / "final.pt", weights_only=True)
    live = torch.load(run / "state.pt", weights_only=True)["policy"]
    assert final["extra"]["step"] == 3
    assert all(torch.equal(final["state_dict"][k], v) for k, v in live.items())
    logged = read_events(run / "events.ndjson", TRAIN_STEP_EVENT)
    assert [e["step"] for e in logged] == [1, 2, 3]
    # Each step's CPU (this process's, every thread) beside its wall time; the report sums them.
    assert all(e["cpu_seconds"] > 0 for e in logged)
    hours = summarize_run(run)["hours"]
    assert hours["cpu_steps"] == 3
    assert hours["cpu"] == pytest.approx(sum(e["cpu_seconds"] for e in logged) / 3600, abs=1e-3)
    assert hours["wall"] == pytest.approx(sum(e["seconds"] for e in logged) / 3600, abs=1e-3)
    draws = read_events(run / "events.ndjson", "league.opponent_sampled")
    assert len(draws) == 3 * 6
    # Cold start (one checkpoint): every draw is a baseline.
    assert {d["opponent"] for d in draws} <= set(BASELINES)
    # The step-2 evaluation ran in a background process and rated the challenger.
    rated = read_events(run / "events.ndjson", "league.elo_updated")
    assert rated and rated[0]["challenger"] == "ckpt_000001"
    assert (run / "elo.png").exists()
    assert torch.load(run / "state.pt", weights_only=True)["format"] == STATE_FORMAT

    # A second start without --resume refuses to overwrite the run.
    again = _train(run, "train.steps=3")
    _, err = again.communicate(timeout=120)
    assert again.returncode != 0 and "--resume" in err


def test_killed_run_resumes_from_its_last_step(tmp_path) -> None:
    run = tmp_path / "run"
    proc = _train(run, "train.steps=40", "league.eval_every=100")
    deadline = time.monotonic() + 240
    while _saved_step(run) < 2:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no step finished in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _saved_step(run)
    assert 2 <= killed_at < 40

    resumed = _train(run, "train.steps=40", "league.eval_every=100", resume=True)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert _saved_step(run) == 40
    summary = summarize_run(run)
    assert [s["step"] for s in summary["steps"]] == list(range(1, 41))
    state = LeagueRegistry(run / "league.json").load()
    # The schedule's checkpoints, each once: first, then every 10 steps; any other is an elite
    # (a live rating above the best checkpoint's, which the baselines' ratings can allow).
    names = [a.name for a in state.checkpoints]
    scheduled = ["ckpt_000001", "ckpt_000010", "ckpt_000020", "ckpt_000030", "ckpt_000040"]
    assert len(names) == len(set(names)) and set(scheduled) <= set(names)
    extra = [a for a in state.checkpoints if a.name not in scheduled]
    assert all("elite" in a.extra.get("reasons", ()) for a in extra), [a.name for a in extra]
    resumed_events = read_events(run / "events.ndjson", "diplomacy.train_resumed")
    assert [e["step"] for e in resumed_events] == [killed_at]
    # After cold start every draw came from a PFSP bucket.
    assert summary["pfsp"]["from_step"] == 11 and summary["pfsp"]["draws"] == 30 * 6
    # Every step logged the trainer's resident memory; the summary judges it after a warm-up.
    assert all(s["rss_mb"] > 0 for s in summary["steps"])
    assert summary["memory"]["from_step"] >= 4 and summary["memory"]["to_step"] == 40


class _Planted:
    """A pickle that runs code when loaded (what an attacker would plant as state.pt)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_planted_state_file_runs_no_code_on_resume(tmp_path) -> None:
    run, marker = tmp_path / "run", tmp_path / "pwned"
    run.mkdir()
    (run / "config.yaml").write_text("max_years: 1\n")  # --resume needs the run's config
    torch.save({"format": STATE_FORMAT, "step": _Planted(marker)}, run / "state.pt")
    proc = _train(run, "train.steps=1", resume=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and not marker.exists()
    assert "unreadable or unsafe" in err and "Traceback" not in err


def test_the_backend_is_injected_and_the_same_seeds_play_the_same_games(tmp_path) -> None:
    from leaguezero.common.config import load_config
    from leaguezero.diplomacy.cli.train import make_trainer
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.train.heroes import local_map
    from leaguezero.diplomacy.train.loop import LeagueTrainer, TrainError
    from leaguezero.diplomacy.train.network_hero import NetworkHero

    cfg = load_config(DiplomacyConfig, None, [*TINY, "train.steps=2", "games_dir=null"])
    calls = []

    class CountingMap:  # what RayTaskMap does, in this process (it says it is remote)
        in_process = False

        def __call__(self, fn, shared, jobs):
            calls.append(len(jobs))
            return local_map(fn, shared, jobs)

    counting_map = CountingMap()

    runs = {}
    for name, task_map in (("local", local_map), ("injected", counting_map)):
        trainer = LeagueTrainer(cfg, tmp_path / name, task_map=task_map)
        assert isinstance(trainer.hero, NetworkHero)
        runs[name] = [trainer.train_step()["score_mean"] for _ in range(2)]
        trainer.session.close(timeout=60)
    assert calls == [2, 2] and runs["injected"] == runs["local"]
    with pytest.raises(TrainError, match="use 'local' or 'ray'"):
        make_trainer(cfg, tmp_path / "x", backend="modal")
    llm = load_config(DiplomacyConfig, None, ["train.agent=llm"])
    with pytest.raises(TrainError, match=r"llm\.backend=openai"):
        make_trainer(llm, tmp_path / "y", backend="ray")
    with pytest.raises(TrainError, match=r"llm\.backend=openai"):
        LeagueTrainer(llm, tmp_path / "z", task_map=counting_map)


def test_cosine_schedule_sets_each_steps_learning_rate(tmp_path) -> None:
    from leaguezero.common.config import load_config
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.train.loop import LeagueTrainer

    sched = ["train.steps=3", "train.lr=0.004", "train.lr_schedule=cosine", "train.lr_final=0.25"]
    cfg = load_config(DiplomacyConfig, None, [*TINY, *sched, "games_dir=null"])
    trainer = LeagueTrainer(cfg, tmp_path / "run")
    try:
        lrs = [trainer.train_step()["lr"] for _ in range(3)]
    finally:
        trainer.session.close(timeout=60)
    assert lrs == pytest.approx([0.004, 0.0025, 0.001])
    assert trainer.trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.001)
    events = [
        e for e in read_events(tmp_path / "run" / "events.ndjson") if e["event"] == TRAIN_STEP_EVENT
    ]
    assert [e["lr"] for e in events] == pytest.approx(lrs)


def test_live_seats_train_every_mirror_seat_with_its_own_score(tmp_path) -> None:
    from leaguezero.common.config import load_config
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.catalogue import parse_seating
    from leaguezero.diplomacy.game.env import POWERS
    from leaguezero.diplomacy.train.loop import LeagueTrainer

    overrides = [*TINY, "games_dir=null", "train.credit=phase"]  # live_seats: the default
    cfg = load_config(DiplomacyConfig, None, overrides)
    trainer = LeagueTrainer(cfg, tmp_path / "run")
    try:
        # The hero at FRANCE, its mirrors at ENGLAND and ITALY, bots elsewhere.
        seating = {p: "random_bot" for p in POWERS}
        seating.update(FRANCE="hero", ENGLAND="hero", ITALY="hero")
        seating = parse_seating(seating)
        groups, results = trainer.play_group(0, seating, "FRANCE")
        assert [{r.power for s in g for r in s.seat_records} for g in groups] == [
            {"FRANCE"}, {"ENGLAND"}, {"ITALY"}
        ]  # fmt: skip
        for group, power in zip(groups, ["FRANCE", "ENGLAND", "ITALY"], strict=True):
            assert [s.score for s in group] == [
                next(x.score for x in r.participants if x.seat == power) for r in results
            ]
            assert all(s.seat_phase_start["S1901M"] == 4.5 for s in group)  # 3 centres, 3 units
        metrics = trainer.trainer.step(groups)
        assert metrics["records"] > 0
        # learn_from=hero trains the hero power's seat only.
        trainer.cfg.train.learn_from = "hero"
        groups, _ = trainer.play_group(1, seating, "FRANCE")
        assert len(groups) == 1 and {r.power for s in groups[0] for r in s.seat_records} == {
            "FRANCE"
        }
    finally:
        trainer.session.close(timeout=60)


def test_resume_reads_the_runs_own_config_as_yz_run_does(tmp_path) -> None:
    from typer.testing import CliRunner

    from leaguezero.cli import app

    def train(*args: str):
        return CliRunner().invoke(app, ["diplomacy", "train", "--quiet", *args])

    empty = tmp_path / "empty"
    empty.mkdir()
    result = train("--out", str(empty), "--resume")
    assert result.exit_code != 0 and "holds no run" in result.output
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run:\n  backend: local\n")
    result = train("--out", str(run), "--resume", "--config", str(run / "config.yaml"))
    assert result.exit_code != 0 and "own config.yaml" in result.output
    result = train("--out", str(run))
    assert result.exit_code != 0 and "--resume" in result.output


def test_the_backend_is_a_config_key_the_saved_config_records(tmp_path) -> None:
    from typer.testing import CliRunner

    from leaguezero.cli import app

    bad = ["diplomacy", "train", "--quiet", "--out", str(tmp_path / "x"), "--backend", "modal"]
    result = CliRunner().invoke(app, bad)
    assert result.exit_code != 0 and "run.backend" in result.output
    run = tmp_path / "run"
    args = [a for item in [*TINY, "train.steps=1"] for a in ("--set", item)]
    result = CliRunner().invoke(app, ["diplomacy", "train", "--quiet", "--out", str(run), *args])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["run"]["backend"] == "local" and "seed" not in saved


def test_a_step_that_trains_nothing_says_so(tmp_path, monkeypatch) -> None:
    """Groups whose rewards are all equal give no record an advantage: the step makes no
    update, and the run says so (event, step record, a stderr line) instead of passing for a
    trained step; the smoke runs above assert records > 0."""
    import dataclasses

    from typer.testing import CliRunner

    from leaguezero.cli import app
    from leaguezero.diplomacy.train import loop as loop_module

    real = loop_module.LeagueTrainer.play_group

    def flat(self, group_idx, seating, hero_power):
        samples, results = real(self, group_idx, seating, hero_power)
        same = [
            [dataclasses.replace(g, rewards=dict.fromkeys(g.scores, 1.0)) for g in group]
            for group in samples
        ]
        return same, results

    monkeypatch.setattr(loop_module.LeagueTrainer, "play_group", flat)
    args = ["diplomacy", "train", "--out", str(tmp_path / "run"), "--set", "train.steps=1"]
    for item in TINY:
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "warning: step 1 trained nothing" in result.stderr
    events = read_events(tmp_path / "run" / "events.ndjson")
    (step,) = [e for e in events if e["event"] == TRAIN_STEP_EVENT]
    assert step["records"] == 0 and "reward spread 0" in step["warning"]
    assert any(e["event"] == loop_module.NOTHING_TRAINED_EVENT for e in events)


def test_sigterm_stops_the_run_as_ctrl_c_does_and_it_resumes(tmp_path) -> None:
    # `kill` is how a scheduler or a user stops a run: it unwinds (the evaluation process
    # stopped, the helpers closed), says how to go on, and the run resumes from its last step.
    run = tmp_path / "run"
    proc = _train(run, "train.steps=40", "league.eval_every=2")
    deadline = time.monotonic() + 300
    while _saved_step(run) < 2:  # step 2 submitted an evaluation
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no step finished in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    stopped_at = _saved_step(run)
    assert f"the {stopped_at} finished steps are kept" in err and "--resume" in err
    # The evaluations this run started have all ended with it (pids from the event log).
    started = read_events(run / "events.ndjson", "league.evaluation_started")
    assert started
    assert all(_gone(int(event["pid"])) for event in started)

    resumed = _train(run, f"train.steps={stopped_at + 1}", "league.eval_every=2", resume=True)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert _saved_step(run) == stopped_at + 1


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (within a generous deadline; a zombie has ended too)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False
