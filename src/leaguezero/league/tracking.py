"""League events (NDJSON, docs/reference/design.md's names), the Elo chart (PNG) and WandB logging.

Events, all written through :class:`leaguezero.common.events.EventWriter`:

- ``league.checkpoint_added``: ``step``, ``agent``, ``elo``, ``parent``, ``reasons``;
- ``league.elo_updated``: ``step`` (the challenger's training step, the chart's x-axis, so a
  late evaluator result still lands at its step), ``challenger``, ``ratings``, ``intervals``,
  ``games``, ``baselines`` (names), ``method``;
- ``league.opponent_sampled``: ``step``, ``opponent``, ``bucket``, ``opponent_type``,
  ``opponent_elo``, ``probability``;
- ``league.step_summary``: ``step``, ``hero_elo``, ``draws``, ``buckets``, ``opponent_types``
  (counts), ``win_rate_by_type`` (the hero's pairwise score by opponent type) — one per
  training step or iteration, from :class:`~leaguezero.league.session.LeagueSession`;
- ``league.evaluation_started`` / ``_finished`` / ``_failed`` / ``_skipped`` from the evaluator.

:class:`WandbTracker` mirrors the step summaries and the ratings to Weights & Biases.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from leaguezero.common.events import EventWriter, read_events
from leaguezero.league.matchmaker import Draw
from leaguezero.league.rating import RELATIVE_TO, relative_ratings
from leaguezero.league.types import AgentInfo

CHECKPOINT_ADDED = "league.checkpoint_added"
ELO_UPDATED = "league.elo_updated"
OPPONENT_SAMPLED = "league.opponent_sampled"
STEP_SUMMARY = "league.step_summary"


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


def elo_series(
    events_path: str | os.PathLike, *, relative: bool = False
) -> dict[str, list[tuple[int, float]]]:
    """The chart's lines from ``league.elo_updated`` events, sorted by step.

    ``Hero``: the challenger's rating at its step; ``Past_Best``: the best checkpoint rating
    among challengers evaluated up to that step; ``Baseline:<name>``: every rated baseline
    (anchored ones are flat). Later refits of the same step replace earlier ones.
    ``relative``: every rating minus ``base_model``'s in the same event
    (:func:`~.rating.relative_ratings`); events that did not rate ``base_model`` are left out.
    """
    hero: dict[int, float] = {}
    baselines: dict[str, dict[int, float]] = {}
    for event in read_events(events_path, ELO_UPDATED):
        step, challenger, ratings = event.get("step"), event.get("challenger"), event["ratings"]
        if step is None:
            continue
        if relative:
            ratings = relative_ratings(ratings)
            if ratings is None:
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
    """Write ``League/Elo_Rating`` (Hero, Past_Best and baseline lines vs step) as a PNG; when
    the evaluations rated ``base_model``, a second panel shows the same lines relative to it
    (base_model = 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("League/Elo_Rating", "Elo", elo_series(events_path))]
    relative = elo_series(events_path, relative=True)
    if any(relative.values()):
        panels.append((f"relative to {RELATIVE_TO}", f"Elo - {RELATIVE_TO}", relative))
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
    for ax, (title, ylabel, series) in zip(axes[0], panels, strict=True):
        for name, points in series.items():
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            style: dict[str, Any] = {"linestyle": "--"} if name.startswith("Baseline") else {}
            ax.plot(xs, ys, marker="o" if name == "Hero" else None, label=name, **style)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if any(series.values()):
            ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)  # atomic: a viewer never sees half a PNG
    return out


class WandbTracker:
    """WandB logging of a league run (optional ``wandb`` extra; ``offline`` needs no network).

    Every metric is plotted against ``league/step`` (the hero's training step), declared with
    ``define_metric``, so an evaluator result that arrives late still lands at its step:
    ``League/Elo_Rating/{Hero,Past_Best,Baseline_<name>}`` scalars (and, for events that rated
    ``base_model``, ``League/Elo_vs_base_model/{Hero,Baseline_<name>}``: base_model = 0) and a
    ``League/Elo_Rating`` line-series chart, and per step ``League/opponent_share/<type>``,
    ``League/bucket_share/<bucket>``, ``League/win_rate/<type>`` and ``League/hero_elo``.
    The run id derives from the run directory, so ``--resume`` continues the same WandB run.
    """

    def __init__(
        self, run_name: str, run_dir: str | os.PathLike, mode: str, config: Mapping[str, Any]
    ) -> None:
        try:
            import wandb
        except ImportError:
            raise RuntimeError(
                "league.wandb is true but wandb is not installed: pip install 'leaguezero[wandb]'"
                " or set league.wandb=false"
            ) from None
        self.wandb = wandb
        digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
        self.run = wandb.init(
            project="leaguezero", name=run_name, dir=str(run_dir), mode=mode,
            config=dict(config), id=f"{run_name}-{digest}", resume="allow",
        )  # fmt: skip
        self.run.define_metric("league/step")
        self.run.define_metric("League/*", step_metric="league/step")
        self._seen = 0

    def log_step(self, summary: Mapping[str, Any]) -> None:
        """One ``league.step_summary`` (see the module doc) as shares and win rates."""
        draws = max(1, summary["draws"])
        row: dict[str, Any] = {"league/step": summary["step"]}
        for kind, n in summary["opponent_types"].items():
            row[f"League/opponent_share/{kind}"] = n / draws
        for bucket, n in summary["buckets"].items():
            row[f"League/bucket_share/{bucket}"] = n / draws
        for kind, rate in summary["win_rate_by_type"].items():
            row[f"League/win_rate/{kind}"] = rate
        if summary.get("hero_elo") is not None:
            row["League/hero_elo"] = summary["hero_elo"]
        self.run.log(row)

    def log_new_ratings(self, events_path: str | os.PathLike) -> None:
        """Log the ``league.elo_updated`` events not logged yet, and redraw the line chart."""
        new = list(read_events(events_path, ELO_UPDATED))[self._seen :]
        if not new:
            return
        self._seen += len(new)
        for event in new:
            ratings = event["ratings"]
            row: dict[str, Any] = {"league/step": event["step"]}
            if event.get("challenger") in ratings:
                row["League/Elo_Rating/Hero"] = ratings[event["challenger"]]
            for name in event.get("baselines", []):
                if name in ratings:
                    row[f"League/Elo_Rating/Baseline_{name}"] = ratings[name]
            relative = relative_ratings(ratings)
            if relative is not None:
                prefix = f"League/Elo_vs_{RELATIVE_TO}"
                if event.get("challenger") in relative:
                    row[f"{prefix}/Hero"] = relative[event["challenger"]]
                for name in event.get("baselines", []):
                    if name in relative:
                        row[f"{prefix}/Baseline_{name}"] = relative[name]
            self.run.log(row)
        series = elo_series(events_path)
        steps = sorted({s for points in series.values() for s, _ in points})
        lines, keys = [], []
        for key, points in series.items():
            if points:
                values = dict(points)
                last = None
                filled = []
                for s in steps:  # forward-fill so every line spans the same x values
                    last = values.get(s, last)
                    filled.append(last if last is not None else float("nan"))
                lines.append(filled)
                keys.append(key)
        if steps and lines:
            chart = self.wandb.plot.line_series(
                xs=steps, ys=lines, keys=keys, title="League/Elo_Rating", xname="training step"
            )
            self.run.log({"League/Elo_Rating": chart, "league/step": steps[-1]})
        past_best = series.get("Past_Best") or []
        if past_best:
            self.run.log({"league/step": past_best[-1][0],
                          "League/Elo_Rating/Past_Best": past_best[-1][1]})  # fmt: skip

    def finish(self) -> None:
        self.run.finish()
