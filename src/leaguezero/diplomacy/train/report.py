"""What a Diplomacy league run did, from its files: curves, PFSP shares, ratings vs baselines.

:func:`summarize_run` reads ``events.ndjson``, ``league_matches.ndjson`` and ``config.yaml`` of a
run directory (``leaguezero diplomacy train-report RUN_DIR``) and returns:

- ``hours``: the steps' wall hours, and their CPU hours where the steps logged it;
- ``steps``: per training step the hero's mean score, loss, clip fraction, KL, seconds (wall,
  playing, and the trainer process's CPU), the
  share of truncated answers and the sampler weight's statistics (``is_*``: ratio min, mean,
  max, shares capped and outside the cap, mean |log ratio|; None before they were logged);
- ``pfsp``: the share of ``league.opponent_sampled`` draws per bucket over the steps after cold
  start (from the step after the ``min_checkpoints``-th checkpoint joined, or a later
  ``from_step``), each with its standard error (the draws are independent), the run's
  configured targets and whether each share is within ``PFSP_TOLERANCE`` of its target (the
  league spec's ±3 points); ``opponents``: the same draws by whom they seated (``self``: the
  live hero; ``checkpoints``: its past checkpoints and exploiter snapshots; each fixed bot by
  name), which says how much of the hero's play was against the agents it is judged against;
- ``evaluations``: per ``league.elo_updated`` the hero's (challenger's) rating, each baseline's
  rating, whether the hero was above all of them, and its win rate against six
  ``random_bot`` clones in that evaluation (win = single highest final score, ties shared);
  ``relative_to`` (``base_model`` when the event rated it, else None), ``hero_elo_relative`` and
  ``baselines_relative`` (ratings minus base_model's: base_model = 0; None without it,
  :func:`~leaguezero.league.rating.relative_ratings`); ``suite`` and ``suite_passed``: the
  challenger's win rate and floor against each benchmark-suite opponent (from
  ``league.evaluation_finished``; informational, few and often short games);
- ``memory``: the trainer's resident memory over the steps after a 10% warm-up (growth, slope
  per 1,000 steps, maximum; :func:`~leaguezero.common.memory.memory_growth`), None before
  ``rss_mb`` was logged;
- ``errors``: evaluator failures and errors (``league.evaluation_failed`` / ``_error``);
- ``lineage``: where the run started (``RUN/lineage.json``, ``--init-from``), None for fresh
  weights.

A resumed run redoes the steps after its last saved state; draws and metrics of the redone
steps replace the first attempt's (``diplomacy.train_resumed`` marks the point).
:func:`plot_training` draws the curves (score, ratings, win rate vs random_bot, memory) into
one PNG.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from leaguezero.common.config import read_yaml_file
from leaguezero.common.events import iter_events
from leaguezero.common.memory import memory_growth
from leaguezero.diplomacy.train.lineage import read_lineage
from leaguezero.league.matchlog import MatchLog
from leaguezero.league.rating import RELATIVE_TO, relative_ratings
from leaguezero.league.types import OpponentType

TARGETS = {"mirror": 0.30, "peers": 0.40, "exploitable": 0.20, "baselines": 0.10}
PFSP_TOLERANCE = 0.03  # the league spec's "30/40/20/10 ± 3"


def summarize_run(run_dir: str | os.PathLike, from_step: int | None = None) -> dict[str, Any]:
    """The run's curves and checks (module doc); ``from_step``: count PFSP draws from this
    step on (default: the end of cold start). Raises ``FileNotFoundError`` without events."""
    run = Path(run_dir)
    events_path = run / "events.ndjson"
    if not events_path.exists():
        raise FileNotFoundError(f"{events_path} does not exist; is {run} a training run?")
    config = (read_yaml_file(run / "config.yaml") or {}) if (run / "config.yaml").exists() else {}
    league = config.get("league") or {}
    min_checkpoints = int(league.get("min_checkpoints", 2))
    targets = {b: float(league.get(f"{b}_share", t)) for b, t in TARGETS.items()}

    draws: dict[int, list[tuple[str, str]]] = defaultdict(list)
    steps: dict[int, dict[str, Any]] = {}
    checkpoint_steps: list[int] = []
    evaluations: dict[int, dict[str, Any]] = {}
    errors: list[dict[str, Any]] = []
    suites: dict[int, dict[str, Any]] = {}
    for event in iter_events(events_path):
        name = event["event"]
        if name == "diplomacy.train_resumed":
            resumed = int(event["step"])
            for table in (draws, steps):
                for step in [s for s in table if s > resumed]:
                    del table[step]
        elif name == "league.opponent_sampled":
            draws[int(event["step"])].append((event["bucket"], _opponent_group(event)))
        elif name == "diplomacy.train_step":
            steps[int(event["step"])] = event
        elif name == "league.checkpoint_added":
            checkpoint_steps.append(int(event["step"]))
        elif name == "league.elo_updated":
            evaluations[int(event["step"])] = _evaluation(event)
        elif name == "league.evaluation_finished" and "suite" in event:
            suites[int(event["step"])] = {
                "suite": event["suite"],
                "suite_passed": event.get("suite_passed"),
            }
        elif name in ("league.evaluation_failed", "league.evaluation_error"):
            errors.append(event)

    _add_random_bot_wins(run, evaluations)
    for step, entry in evaluations.items():
        entry.update(suites.get(step, {"suite": None, "suite_passed": None}))

    ordered = [steps[s] for s in sorted(steps)]
    keys = (
        "score_mean", "loss", "policy_loss", "kl", "kl_coef", "clip_fraction", "seconds",
        "play_seconds", "cpu_seconds", "hero_elo", "rss_mb", "truncated_share", "is_ratio_min",
        "is_ratio_mean", "is_ratio_max", "is_capped_share", "is_outside_share",
        "is_log_ratio_abs_mean",
    )  # fmt: skip
    return {
        "run_dir": str(run),
        "steps": [{"step": r["step"], **{k: r.get(k) for k in keys}} for r in ordered],
        "hours": _hours(ordered),
        "pfsp": _pfsp_shares(
            draws, sorted(set(checkpoint_steps)), min_checkpoints, targets, from_step
        ),
        "evaluations": [evaluations[s] for s in sorted(evaluations)],
        "errors": errors,
        # RSS after the warm-up (steps logged before rss_mb existed have none).
        "memory": memory_growth(
            [(r["step"], r["rss_mb"]) for r in ordered if r.get("rss_mb") is not None]
        ),
        "lineage": read_lineage(run),
    }


def _hours(steps: list[dict[str, Any]]) -> dict[str, float | None]:
    """The steps' wall and CPU hours (the trainer process's CPU, logged as ``cpu_seconds``;
    None when no step logged it, the CPU of steps before it did left out of the sum)."""
    cpu = [r["cpu_seconds"] for r in steps if r.get("cpu_seconds") is not None]
    return {
        "wall": round(sum(r.get("seconds") or 0.0 for r in steps) / 3600, 3),
        "cpu": round(sum(cpu) / 3600, 3) if cpu else None,
        "cpu_steps": len(cpu),
    }


def _evaluation(event: dict[str, Any]) -> dict[str, Any]:
    """One ``league.elo_updated`` event as an evaluation entry: the hero's Elo, the baselines',
    and both relative to :data:`RELATIVE_TO` when it is rated."""
    ratings, challenger = event["ratings"], event.get("challenger")
    base = {b: ratings[b] for b in event.get("baselines", []) if b in ratings}
    hero = ratings.get(challenger)
    relative = relative_ratings(ratings)
    return {
        "step": int(event["step"]),
        "challenger": challenger,
        "hero_elo": hero,
        "baselines": base,
        "above_baselines": hero is not None and all(hero > v for v in base.values()),
        "relative_to": None if relative is None else RELATIVE_TO,
        "hero_elo_relative": None if relative is None else relative.get(challenger),
        "baselines_relative": None if relative is None else {b: relative[b] for b in base},
    }


def _opponent_group(event: dict[str, Any]) -> str:
    """Whom a ``league.opponent_sampled`` draw seated: ``self``, ``checkpoints`` or the fixed
    bot's name."""
    kind = event.get("opponent_type")
    if kind == OpponentType.BASELINE:
        return str(event["opponent"])
    return "self" if kind == OpponentType.SELF else "checkpoints"


def _pfsp_shares(
    draws: dict[int, list[tuple[str, str]]],
    checkpoint_steps: list[int],
    min_checkpoints: int,
    targets: dict[str, float],
    from_step: int | None = None,
) -> dict[str, Any]:
    """The opponent buckets' shares once PFSP runs (after ``min_checkpoints`` checkpoints, or
    from ``from_step`` if later), with standard errors, the tolerance check and whom the draws
    seated."""
    pfsp_from = (
        checkpoint_steps[min_checkpoints - 1] + 1
        if len(checkpoint_steps) >= min_checkpoints
        else None
    )
    if pfsp_from is not None and from_step is not None:
        pfsp_from = max(pfsp_from, from_step)
    counts: Counter[str] = Counter()
    opponents: Counter[str] = Counter()
    for step, drawn in draws.items():
        if pfsp_from is not None and step >= pfsp_from:
            for bucket, group in drawn:
                counts[bucket] += 1
                opponents[group] += 1
    total = sum(counts.values())
    shares = {b: (counts[b] / total if total else 0.0) for b in targets}
    return {
        "from_step": pfsp_from,
        "draws": total,
        "shares": shares,
        "se": {b: (math.sqrt(p * (1 - p) / total) if total else None) for b, p in shares.items()},
        "targets": targets,
        "tolerance": PFSP_TOLERANCE,
        "within_tolerance": {
            b: bool(total) and abs(shares[b] - targets[b]) <= PFSP_TOLERANCE + 1e-12
            for b in targets
        },
        "max_abs_deviation_points": max(abs(shares[b] - targets[b]) for b in targets) * 100,
        "opponents": {g: n / total for g, n in opponents.most_common()},
    }


def _add_random_bot_wins(run: Path, evaluations: dict[int, dict[str, Any]]) -> None:
    """Each evaluation's games and win rate against ``random_bot`` (from the match log)."""
    wins: dict[int, list[float]] = defaultdict(list)
    matchlog = run / "league_matches.ndjson"
    if matchlog.exists():
        for match in MatchLog(matchlog).read(kind="evaluation"):
            if match.meta.get("gatekeeper") == "random_bot" and "hero_win" in match.meta:
                wins[match.step].append(float(match.meta["hero_win"]))
    for step, entry in evaluations.items():
        games = wins.get(step, [])
        entry["random_bot_games"] = len(games)
        entry["random_bot_win_rate"] = sum(games) / len(games) if games else None


def plot_training(summary: dict[str, Any], out_path: str | os.PathLike) -> Path:
    """Mean hero score per step, hero vs baseline ratings, win rate vs random_bot: one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    xs = [r["step"] for r in summary["steps"]]
    ys = [r["score_mean"] for r in summary["steps"]]
    axes[0].plot(xs, ys, alpha=0.3, label="per step")
    window = 20
    smooth = [
        sum(ys[max(0, i - window + 1) : i + 1]) / len(ys[max(0, i - window + 1) : i + 1])
        for i in range(len(ys))
    ]
    axes[0].plot(xs, smooth, label=f"mean of last {window}")
    axes[0].set(title="hero final score (training games)", xlabel="step", ylabel="score")
    evals = [e for e in summary["evaluations"] if e["hero_elo"] is not None]
    axes[1].plot(
        [e["step"] for e in evals], [e["hero_elo"] for e in evals], marker="o", label="hero"
    )
    names = sorted({b for e in evals for b in e["baselines"]})
    for name in names:
        points = [(e["step"], e["baselines"][name]) for e in evals if name in e["baselines"]]
        axes[1].plot(*zip(*points, strict=True), linestyle="--", label=name)
    axes[1].set(title="ratings at each evaluation", xlabel="step", ylabel="Elo")
    rated = [e for e in summary["evaluations"] if e["random_bot_win_rate"] is not None]
    axes[2].plot([e["step"] for e in rated], [e["random_bot_win_rate"] for e in rated], marker="o")
    axes[2].axhline(0.8, color="grey", linestyle=":", label="0.8")
    axes[2].set(
        title="win rate vs 6 random_bots (per evaluation)", xlabel="step", ylim=(-0.05, 1.05)
    )
    memory = [(r["step"], r["rss_mb"]) for r in summary["steps"] if r.get("rss_mb") is not None]
    if memory:
        axes[3].plot(*zip(*memory, strict=True), label="trainer RSS")
    axes[3].set(title="trainer resident memory", xlabel="step", ylabel="MiB")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out_path)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)  # atomic: a viewer never sees half a PNG
    return out


def write_report(run_dir: str | os.PathLike, from_step: int | None = None) -> dict[str, Any]:
    """Write ``training_summary.json`` (with the payoff table and Nash-averaged ratings),
    ``training.png`` and ``league_matrix.png`` into the run; returns the summary
    (``from_step``: :func:`summarize_run`'s)."""
    from leaguezero.common.atomic import atomic_write_json

    run = Path(run_dir)
    summary = summarize_run(run, from_step)
    summary["payoff"] = _payoff(run)
    atomic_write_json(run / "training_summary.json", summary)
    plot_training(summary, run / "training.png")
    return summary


def _payoff(run: Path) -> dict[str, Any] | None:
    """The run's payoff table over its match log (``league.payoff``): every pair's mean pairwise
    score and games, each agent's Nash-averaged rating; also ``league_matrix.png``. None
    without games between distinct agents."""
    from leaguezero.league.evaluator import evaluator_paths
    from leaguezero.league.matchlog import read_matches
    from leaguezero.league.payoff import nash_average, payoff_table, plot_payoff

    matchlog = evaluator_paths(run)["matchlog"]
    if not matchlog.exists():
        return None
    table = payoff_table(read_matches(matchlog))
    if not table.agents:
        return None
    nash = nash_average(table)
    plot_payoff(table, run / "league_matrix.png", nash)
    return {**table.to_dict(), "nash": nash}
