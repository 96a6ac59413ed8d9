"""Small run directories written with the project's own writers: a yz run's iteration stats and a
league run (registry, match log, events) that :func:`advance_league_run` can grow while served."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from leaguezero.common.events import EventWriter
from leaguezero.league.matchlog import append_matches
from leaguezero.league.matchmaker import Draw
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.tracking import emit_elo_updated, emit_opponents_sampled
from leaguezero.league.types import Bucket, MatchResult, OpponentType, Participant

BASELINES = {"random_bot": 800.0, "chaos_bot": 900.0, "base_model": 1000.0}


YATZY_ITERATIONS = 10  # the fake yz run's planned iterations (its config.yaml)


def make_yatzy_run(root: Path, with_best: bool = False) -> Path:
    """A yz run directory with five of ten iterations done (what `leaguezero report` reads) and
    the sixth in training (``run_state.json``); ``with_best``: the shipped network as its
    ``models/best.pt`` (a real checkpoint the play page can load)."""
    (root / "logs").mkdir(parents=True)
    if with_best:
        from leaguezero.yatzy.agents.registry import PRETRAINED_PATH

        (root / "models").mkdir()
        shutil.copyfile(PRETRAINED_PATH, root / "models" / "best.pt")
    (root / "config.yaml").write_text(f"run:\n  iterations: {YATZY_ITERATIONS}\n")
    rows = [_yatzy_row(it) for it in range(1, 6)]
    (root / "logs" / "iteration_stats.ndjson").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    _yatzy_state(root, 5)
    return root


def advance_yatzy_run(root: Path, iteration: int) -> None:
    """The fake yz run finishes ``iteration`` (its stats line) and starts the next."""
    with open(root / "logs" / "iteration_stats.ndjson", "a") as stats:
        stats.write(json.dumps(_yatzy_row(iteration)) + "\n")
    _yatzy_state(root, iteration)


def _yatzy_state(root: Path, iteration: int) -> None:
    state = {"schema_version": 1, "iteration": iteration, "phases": ["selfplay"]}
    (root / "run_state.json").write_text(json.dumps(state))


LUCKY_ITERATION = 3  # its best's 100-board sample came out high: the maximum the page must not show
LUCKY_MEAN = 249.1


def _yatzy_row(it: int) -> dict:
    """Iteration ``it``'s stats line, as the loop writes it (``_flat``: the headline numbers and
    the record as ``detail``, whose evals carry each mean's standard error)."""
    cand, best = 150.0 + 10 * it, LUCKY_MEAN if it == LUCKY_ITERATION else 145.0 + 10 * it
    evals = {who: {"mean": mean, "se": 4.0 + 0.1 * it, "boards": 100}
             for who, mean in (("candidate", cand), ("best", best))}  # fmt: skip
    return {
            "ts": 1_700_000_000 + 120 * it, "event": "iteration", "iteration": it,
            "promoted": it % 2 == 0,
            "loss_policy": 3.0 - 0.1 * it, "loss_value": 0.9 - 0.05 * it, "loss_margin": 0.3,
            "loss_total": 4.0 - 0.2 * it, "gate_win_rate": 0.5 + 0.01 * it, "gate_games": 200,
            "solitaire_mean": cand, "best_solitaire_mean": best,
            "mean_regret_per_game": 90 - 10 * it, "oracle_match_rate": 0.3 + 0.05 * it,
            "win_rate_vs_greedy": 0.2 + 0.1 * it, "win_rate_vs_oracle": 0.02 * it,
            "detail": {"iteration": it, "eval": evals},
    }  # fmt: skip


def make_league_run(root: Path, steps: int = 3) -> Path:
    """A Diplomacy-style league run with ``steps`` checkpoints rated against three baselines."""
    root.mkdir(parents=True)
    LeagueRegistry.create(root / "league.json", run_name="web_test", baselines=BASELINES)
    for step in range(1, steps + 1):
        advance_league_run(root, step * 10)
    return root


def advance_league_run(root: Path, step: int) -> str:
    """Add checkpoint ``ckpt_{step}``, its matches, draws and a refit, as a training run would."""
    registry = LeagueRegistry(root / "league.json")
    name = f"ckpt_{step:06d}"
    elo = 1000.0 + 4 * step
    with registry.update() as state:
        state.add_checkpoint(name, path=None, step=step, elo=elo)
        ratings = {a.name: a.elo for a in state.agents.values()}
        intervals = {n: (r - 40.0, r + 40.0) for n, r in ratings.items()}
        state.set_ratings(ratings, intervals=intervals, step=step)
    matches = [
        MatchResult(
            participants=(Participant(name, 0, 0.6), Participant(opponent, 1, 0.4)),
            step=step,
            kind="training",
            game="diplomacy",
        )
        for opponent in BASELINES
    ]
    append_matches(root / "league_matches.ndjson", matches)
    events = EventWriter(root / "events.ndjson")
    draws = [
        Draw(name, Bucket.MIRROR, OpponentType.SELF, elo, 0.5),
        Draw("random_bot", Bucket.BASELINES, OpponentType.BASELINE, 800.0, 0.3),
        Draw("chaos_bot", Bucket.PEERS, OpponentType.BASELINE, 900.0, 0.2),
    ]
    emit_opponents_sampled(events, step, draws)
    emit_elo_updated(
        events, step=step, challenger=name, ratings=ratings, intervals=intervals,
        baselines=list(BASELINES),
    )  # fmt: skip
    events.close()
    return name
