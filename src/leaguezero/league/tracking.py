"""League events (NDJSON, the spec's names) and the Elo chart.

Events, all written through :class:`leaguezero.common.events.EventWriter`:

- ``league.checkpoint_added``: ``step``, ``agent``, ``elo``, ``parent``, ``reasons``;
- ``league.elo_updated``: ``step`` (the challenger's training step, the chart's x-axis, so a
  late evaluator result still lands at its step), ``challenger``, ``ratings``, ``intervals``,
  ``games``, ``baselines`` (names), ``method``;
- ``league.opponent_sampled``: ``step``, ``opponent``, ``bucket``, ``opponent_type``,
  ``opponent_elo``, ``probability``;
- ``league.evaluation_started`` / ``_finished`` / ``_failed`` / ``_skipped`` from the evaluator.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from leaguezero.common.events import EventWriter, read_events
from leaguezero.league.matchmaker import Draw
from leaguezero.league.types import AgentInfo

CHECKPOINT_ADDED = "league.checkpoint_added"
ELO_UPDATED = "league.elo_updated"
OPPONENT_SAMPLED = "league.opponent_sampled"


def emit_checkpoint_added(
    events: EventWriter | None, agent: AgentInfo, reasons: Iterable[str] = ()
) -> None:
    if events is not None:
        events.emit(
            CHECKPOINT_ADDED,
            step=agent.step,
            agent=agent.name,
            elo=agent.elo,
            parent=agent.parent,
            reasons=list(reasons),
        )


def emit_opponents_sampled(events: EventWriter | None, step: int, draws: Iterable[Draw]) -> None:
    if events is not None:
        for draw in draws:
            events.emit(OPPONENT_SAMPLED, step=step, **draw.to_event())


def emit_elo_updated(
    events: EventWriter | None,
    *,
    step: int,
    challenger: str | None,
    ratings: Mapping[str, float],
    intervals: Mapping[str, tuple[float, float]] | None = None,
    games: Mapping[str, float] | None = None,
    baselines: Iterable[str] = (),
    method: str = "refit",
) -> None:
    if events is not None:
        events.emit(
            ELO_UPDATED,
            step=step,
            challenger=challenger,
            ratings={k: round(v, 2) for k, v in ratings.items()},
            intervals={
                k: [round(lo, 2), round(hi, 2)] for k, (lo, hi) in (intervals or {}).items()
            },
            games=dict(games or {}),
            baselines=list(baselines),
            method=method,
        )


def elo_series(events_path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """The chart's lines from ``league.elo_updated`` events, sorted by step.

    ``Hero``: the challenger's rating at its step; ``Past_Best``: the best checkpoint rating
    among challengers evaluated up to that step; ``Baseline:<name>``: every rated baseline
    (anchored ones are flat). Later refits of the same step replace earlier ones.
    """
    hero: dict[int, float] = {}
    baselines: dict[str, dict[int, float]] = {}
    for event in read_events(events_path, ELO_UPDATED):
        step, challenger, ratings = event.get("step"), event.get("challenger"), event["ratings"]
        if step is None:
            continue
        if challenger in ratings:
            hero[step] = ratings[challenger]
        for name in event.get("baselines", []):
            if name in ratings:
                baselines.setdefault(name, {})[step] = ratings[name]
    series: dict[str, list[tuple[int, float]]] = {"Hero": sorted(hero.items())}
    best, past_best = float("-inf"), []
    for step, value in series["Hero"]:
        best = max(best, value)
        past_best.append((step, best))
    series["Past_Best"] = past_best
    for name, points in sorted(baselines.items()):
        series[f"Baseline:{name}"] = sorted(points.items())
    return series


def plot_elo(events_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Write ``League/Elo_Rating`` (Hero, Past_Best and baseline lines vs step) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = elo_series(events_path)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in series.items():
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        style: dict[str, Any] = {"linestyle": "--"} if name.startswith("Baseline") else {}
        ax.plot(xs, ys, marker="o" if name == "Hero" else None, label=name, **style)
    ax.set_xlabel("training step")
    ax.set_ylabel("Elo")
    ax.set_title("League/Elo_Rating")
    ax.grid(alpha=0.3)
    if any(series.values()):
        ax.legend(loc="best", fontsize=8)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)  # atomic: a viewer never sees half a PNG
    return out
