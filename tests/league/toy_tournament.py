"""A tiny game for evaluator tests, importable by path from a fresh process.

Each agent has a true strength on the Elo scale (``extra["strength"]``, else its rating); a game
between two agents is won with the Elo/Bradley–Terry probability. Real randomness, seeded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from leaguezero.league.rating import expected_score
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.schedule import promote_if_scheduled
from leaguezero.league.types import AgentInfo, MatchResult, Participant


def make_league(run_dir: Path) -> LeagueRegistry:
    """``run_dir/league.json`` with the random (800) and greedy (1000) baselines at their true
    strengths."""
    reg = LeagueRegistry.create(
        run_dir / "league.json", run_name="ev", baselines={"random": 800.0, "greedy": 1000.0}
    )
    with reg.update() as state:
        state.agents["random"].extra["strength"] = 800.0
        state.agents["greedy"].extra["strength"] = 1000.0
    return reg


def add_checkpoint(run_dir: Path, name: str, step: int, strength: float) -> None:
    """Add checkpoint ``name`` (a dummy weights file) to the league with a true strength."""
    reg = LeagueRegistry(run_dir / "league.json")
    (run_dir / f"{name}.pt").write_bytes(b"w")
    agent = promote_if_scheduled(
        reg, name=name, path=f"{name}.pt", step=step, current_elo=float("-inf")
    )
    assert agent is not None
    with reg.update() as state:
        state.agents[name].extra["strength"] = strength


def coin_tournament(
    challenger: AgentInfo,
    gatekeepers: list[AgentInfo],
    *,
    seed: int,
    games_per_opponent: int = 20,
    sleep: float = 0.0,
    crash_marker: str | None = None,
) -> list[MatchResult]:
    if crash_marker is not None and not Path(crash_marker).exists():
        Path(crash_marker).touch()
        os._exit(3)  # die like a crashed worker: no cleanup, no exception
    if sleep:
        time.sleep(sleep)
    rng = np.random.default_rng(seed)
    strength = {a.name: float(a.extra.get("strength", a.elo)) for a in [challenger, *gatekeepers]}
    results = []
    for keeper in gatekeepers:
        p = expected_score(strength[challenger.name], strength[keeper.name])
        for g in range(games_per_opponent):
            win = float(rng.random() < p)
            seats = [(challenger.name, win), (keeper.name, 1.0 - win)]
            if g % 2:
                seats.reverse()  # side-swapped pairs, as a 2-player game would
            results.append(
                MatchResult(
                    participants=tuple(Participant(a, i, s) for i, (a, s) in enumerate(seats)),
                    game="coin",
                )
            )
    return results


def broken_tournament(challenger, gatekeepers, *, seed):
    raise RuntimeError("the game blew up")
