"""Yatzy in the league: league self-play (hero-only replay), the evaluator's tournament, WandB
offline logging, and `yz run --league` end to end (registry, match log, events, Elo chart, the
evaluator running beside training, resume after a kill)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.az.replay import complete_shards, games_on_disk, read_shard
from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.matchmaker import Draw
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.session import checkpoint_name
from leaguezero.league.types import AgentInfo, AgentKind, Bucket, OpponentType
from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.league.agents import build_league_agent, yatzy_tournament
from leaguezero.yatzy.train.league.play import drop_unplayed, run_league_selfplay
from leaguezero.yatzy.train.selfplay.puct import SHARD_SCHEMA

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[4]
SMOKE = ROOT / "configs" / "yatzy_smoke.yaml"
TURN_START = 75  # feature offset of "rerolls_left == 2": exactly one decision per turn
HERO = "ckpt_0007"


class CountingAgent:
    """Wraps a bot and counts the decisions it was asked for."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.deterministic = inner.deterministic
        self.decisions = 0

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        self.decisions += len(rows)
        return self.inner.act(states, rows)


def _draw(index: int) -> Draw:
    # Game i: a mirror game every third game, else greedy / random alternately.
    if index % 3 == 0:
        return Draw(HERO, Bucket.MIRROR, OpponentType.SELF, 1000.0, 1.0)
    name = "greedy" if index % 3 == 1 else "random"
    return Draw(name, Bucket.BASELINES, OpponentType.BASELINE, 900.0, 0.5)


def _league_selfplay(tmp_path: Path, games: int, both_seats: bool):
    cfg = load_config(
        YatzyConfig,
        SMOKE,
        ["selfplay.concurrent_games=5", "selfplay.shard_samples=150",
         f"league.mirror_both_seats={str(both_seats).lower()}"],
    )  # fmt: skip
    net = build_net(16, 0, True, 0)
    agents = {"greedy": CountingAgent(GreedyAgent()), "random": CountingAgent(RandomAgent(3))}
    logged = []
    stats = run_league_selfplay(
        cfg, TorchEvaluator(net, FEATURE_SCHEMA_ID), tmp_path,
        settings=SearchSettings.from_config(cfg), games=games, seed=5, hero=HERO,
        sample=_draw, agent_for=agents.__getitem__, step=70, on_games=logged.extend,
    )  # fmt: skip
    return stats, agents, logged


@pytest.mark.parametrize("both_seats", [True, False])
def test_league_selfplay_puts_only_hero_decisions_into_replay(tmp_path, both_seats):
    games = 12
    stats, agents, logged = _league_selfplay(tmp_path, games, both_seats)
    mirror_games = sum(1 for i in range(games) if i % 3 == 0)
    samples = [read_shard(p, SHARD_SCHEMA) for p in complete_shards(tmp_path)]
    features = np.concatenate([s.features for s in samples])
    # Every player has exactly one decision with two rerolls left per turn (15 turns): a game
    # contributes 15 of them when only the hero is recorded, 30 when both mirror seats are.
    turn_starts = int((features[:, TURN_START] == 1).sum())
    recorded_seats = games + (mirror_games if both_seats else 0)
    assert turn_starts == 15 * recorded_seats
    assert len(features) == stats.samples and games_on_disk(tmp_path) == games
    # The bots played their own seats (and only those) outside the searched batch.
    assert sum(a.decisions for a in agents.values()) == stats.opponent_decisions > 0
    if both_seats:
        assert stats.samples == stats.decisions  # every searched decision is the hero's
    else:
        assert stats.samples < stats.decisions  # the hero's mirror twin was searched, not kept
    assert stats.opponents == {HERO: mirror_games, "greedy": 4, "random": 4}
    assert stats.buckets == {"mirror": mirror_games, "baselines": games - mirror_games}
    # One training match per game, handed over as it ends, numbered in finishing order.
    assert len(logged) == games and all(r.kind == "training" and r.step == 70 for r in logged)
    assert [r.meta["game"] for r in logged] == list(range(games))
    for result in logged:
        seats = {p.seat: p.agent for p in result.participants}
        hero_seat = result.meta["hero_seat"]
        assert seats[hero_seat] == HERO
        if result.meta["opponent_type"] == "self":
            assert seats[1 - hero_seat] == HERO
        else:
            assert seats[1 - hero_seat] == result.meta["opponent"] != HERO
    assert {r.meta["hero_seat"] for r in logged} == {0, 1}  # the hero plays both seats
    # Greedy beats an untrained net almost always: the hero's results are from its own view.
    assert stats.hero_win_rate_by_opponent["greedy"] <= 0.5


def test_games_a_kill_lost_with_their_shard_leave_the_match_log_and_are_played_again(tmp_path):
    # A kill between a game's log line and its shard's meta file: the log holds games the
    # replay lacks. Resuming drops exactly those, so the log and the replay agree again.
    games = 12
    _, _, logged = _league_selfplay(tmp_path, games, True)
    log = MatchLog(tmp_path / "matches.ndjson")
    log.extend(logged)
    log.extend([dataclasses.replace(logged[0], step=71)])  # another step's game stays
    last = complete_shards(tmp_path)[-1]
    last.with_suffix(".meta.json").unlink()  # the shard being written when the kill came
    kept = games_on_disk(tmp_path)
    assert 0 < kept < games
    assert drop_unplayed(log, 70, tmp_path) == games - kept
    assert drop_unplayed(log, 70, tmp_path) == 0  # idempotent
    assert [r.meta["game"] for r in log.read(kind="training", min_step=70, max_step=70)] == list(
        range(kept)
    )
    _, _, replayed = _league_selfplay(tmp_path, games, True)  # the resumed self-play
    log.extend(replayed)
    assert games_on_disk(tmp_path) == games
    assert [r.meta["game"] for r in log.read(kind="training", max_step=70)] == list(range(games))
    assert len(log.read(min_step=71)) == 1


def test_tournament_pairs_side_swapped_games_and_scores_from_each_seat():
    greedy = AgentInfo("greedy", AgentKind.BASELINE, 1000.0)
    random_bot = AgentInfo("random", AgentKind.BASELINE, 800.0)
    results = yatzy_tournament(greedy, [random_bot], seed=3, games_per_opponent=40)
    assert len(results) == 40
    wins = 0.0
    for pair in range(20):
        first, second = results[2 * pair], results[2 * pair + 1]
        assert first.meta["episode_seed"] == second.meta["episode_seed"]
        assert [first.meta["challenger_seat"], second.meta["challenger_seat"]] == [0, 1]
        for result in (first, second):
            seats = {p.seat: p for p in result.participants}
            me = seats[result.meta["challenger_seat"]]
            other = seats[1 - result.meta["challenger_seat"]]
            assert (me.agent, other.agent) == ("greedy", "random")
            wins += 1.0 if me.score > other.score else 0.5 if me.score == other.score else 0.0
    assert wins / 40 > 0.8  # greedy crushes random: the scores are attributed to the right seat


def test_league_agent_for_unknown_bot_is_a_clear_error():
    with pytest.raises(ValueError, match="not one of the Yatzy bots"):
        build_league_agent(AgentInfo("chaos_bot", AgentKind.BASELINE, 900.0))


# ----- yz run --league, end to end -------------------------------------------------------------

FAST = [
    "--set", "gate.max_games=20", "--set", "gate.min_games=20", "--set", "oracle_eval.games=0",
    "--set", "oracle_eval.match_games=0", "--set", "selfplay.concurrent_games=8",
    "--set", "selfplay.shard_samples=200", "--set", "league.bootstrap=20",
]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _yz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", "yatzy", *args],
        capture_output=True, text=True, env=_env(), timeout=600,
    )  # fmt: skip


def _check_league_run(out: Path, iterations: int) -> list[dict]:
    state = LeagueRegistry(out / "league.json").load()
    names = [a.name for a in state.checkpoints]
    steps = load_config(YatzyConfig, SMOKE).train.steps  # a checkpoint is named by its step
    assert names == [checkpoint_name(i * steps) for i in range(1, iterations + 1)]
    assert all((out / a.path).is_file() for a in state.checkpoints)
    assert {"random", "greedy", "oracle", "base_model"} <= set(state.agents)
    assert state.checkpoints[0].parent == "base_model"
    events = read_events(out / "events.ndjson")
    kinds = [e["event"] for e in events]
    assert kinds.count("league.checkpoint_added") == iterations
    assert kinds.count("league.opponent_sampled") >= iterations * 48
    assert kinds.count("league.elo_updated") >= 1
    assert {e["iteration"] for e in events if e["event"] == "league.iteration_done"} == set(
        range(1, iterations + 1)
    )
    matches = [json.loads(line) for line in (out / "league_matches.ndjson").open()]
    training = [m for m in matches if m["kind"] == "training"]
    assert len(training) == iterations * 48
    assert any(m["kind"] == "evaluation" for m in matches)
    rated = [a for a in state.checkpoints if a.elo_low is not None]
    assert rated and all(a.elo_low <= a.elo <= a.elo_high for a in rated)
    png = out / "league_elo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Cold start: baselines only while fewer than 2 checkpoints exist (iterations 1 and 2).
    first = [e for e in events if e["event"] == "league.opponent_sampled" and e["step"] == 0]
    assert first and {e["bucket"] for e in first} == {"baselines"}
    return events


def _overlaps(events: list[dict]) -> int:
    """Trainer events that happened while an evaluation job was running."""
    trainer = {"league.opponent_sampled", "league.selfplay_started", "league.iteration_done",
               "league.checkpoint_added"}  # fmt: skip
    started = {
        e["challenger"]: e["ts"] for e in events if e["event"] == "league.evaluation_started"
    }
    count = 0
    for e in events:
        if e["event"] == "league.evaluation_finished" and e["challenger"] in started:
            t0, t1 = started[e["challenger"]], e["ts"]
            count += sum(1 for x in events if x["event"] in trainer and t0 < x["ts"] < t1)
    return count


def test_yz_run_league_end_to_end(tmp_path):
    out = tmp_path / "league"
    result = _yz("run", "--config", str(SMOKE), "--league", "--set", "run.iterations=3",
                 "--set", "league.eval_games=60", *FAST, "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "league.json" in result.stdout and "iteration 3/3 took" in result.stdout
    events = _check_league_run(out, 3)
    # The evaluator ran in the background: training kept producing events during a job.
    assert _overlaps(events) > 0
    finished = [e for e in events if e["event"] == "league.evaluation_finished"]
    assert finished and all(e["games"] > 0 for e in finished)
    shown = subprocess.run(
        [sys.executable, "-m", "leaguezero", "league", "show", str(out), "--json"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    steps = load_config(YatzyConfig, SMOKE).train.steps
    assert checkpoint_name(3 * steps) in data["agents"] and data["recent_matches"]


@pytest.mark.slow
def test_yz_run_league_killed_resumes(tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "run", "--config", str(SMOKE), "--league",
         "--set", "run.iterations=3", *FAST, "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(),
    )  # fmt: skip
    second = out / "replay" / "iter_0002"
    deadline = time.time() + 300
    while time.time() < deadline and not complete_shards(second):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 0 < games_on_disk(second) < 48, "the kill should land in iteration 2's self-play"
    result = _yz("run", "--out", str(out), "--resume")
    assert result.returncode == 0, result.stderr
    _check_league_run(out, 3)
    assert games_on_disk(second) == 48
