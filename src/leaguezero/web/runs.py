"""What the run page shows: a run's kind, its league table, PFSP shares, recent matches and the
Elo chart, read with the league's own readers (:mod:`leaguezero.league`) on every request, so a
page that refreshes follows a run while it is going.

A Yatzy run's charts are its report (:func:`leaguezero.web.yatzy_games.run_report`), rebuilt
when the run's stats are newer than the report.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from leaguezero.common.events import read_events
from leaguezero.league.evaluator import evaluator_paths
from leaguezero.league.matchlog import read_matches
from leaguezero.league.rating import RELATIVE_TO, relative_ratings
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.tracking import OPPONENT_SAMPLED, plot_elo

YATZY_STATS = Path("logs") / "iteration_stats.ndjson"
YATZY_PHASES = ("selfplay", "train", "gate", "eval", "promote")  # an iteration's, in order
SHARE_STEPS = 5  # PFSP shares are counted over the draws of the last few training steps
_chart_lock = threading.Lock()  # matplotlib's pyplot is not thread-safe
# The payoff table of a match log, kept while the file is unchanged (the page asks every few
# seconds; a long run's log is thousands of games).
_payoff_cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
_payoff_lock = threading.Lock()


def payoff_view(matchlog: Path) -> dict[str, Any] | None:
    """The match log's payoff table (``league.payoff``) and Nash-averaged ratings for the run
    page: ``agents``, ``cells[i][j]`` (``[mean, games]`` or None where the two never met) and
    ``nash`` (each agent's rating and equilibrium weight); None without games."""
    from leaguezero.league.payoff import nash_average, payoff_table

    if not matchlog.exists():
        return None
    stat = matchlog.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _payoff_lock:
        hit = _payoff_cache.get(str(matchlog))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        table = payoff_table(read_matches(matchlog))
        view = None
        if table.agents:
            k = len(table.agents)
            cells = [
                [
                    [float(table.mean[i, j]), int(table.games[i, j])] if table.games[i, j] else None
                    for j in range(k)
                ]
                for i in range(k)
            ]
            view = {"agents": table.agents, "cells": cells, "nash": nash_average(table)}
        _payoff_cache[str(matchlog)] = (stamp, view)
        return view


def run_kinds(run: Path) -> list[str]:
    """``yatzy`` (a yz run's stats), ``league`` (a league.json) or both; [] for neither."""
    kinds = []
    if (run / YATZY_STATS).exists():
        kinds.append("yatzy")
    if evaluator_paths(run)["registry"].exists():
        kinds.append("league")
    return kinds


def yatzy_status(run: Path) -> dict[str, Any]:
    """Where a yz run stands, for the run page's status line: the last finished iteration of
    the planned ones, the phase under way (from ``run_state.json``), an ETA from the mean
    time of the iterations so far, the current best network's estimate (:func:`best_estimate`)
    and the last promotion. Fields are None where the run has not written what they need."""
    rows = read_events(run / YATZY_STATS, "iteration")
    done = int(rows[-1].get("iteration", len(rows))) if rows else 0
    planned = _planned_iterations(run)
    phase = None
    state_path = run / "run_state.json"
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            state = {}
        finished = state.get("phases", []) if state.get("iteration") == done else []
        phase = next((p for p in YATZY_PHASES if p not in finished), None)
    if planned is not None and done >= planned:
        phase = None  # the run has done what it planned
    stamps = [float(r["ts"]) for r in rows if isinstance(r.get("ts"), (int, float))]
    per_iteration = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None
    eta_s = None
    if per_iteration is not None and planned is not None and phase is not None:
        eta_s = per_iteration * max(0, planned - done)
    promoted = [int(r["iteration"]) for r in rows if r.get("promoted")]
    return {
        "iteration": done,
        "iterations": planned,
        "phase": phase,
        "seconds_per_iteration": per_iteration,
        "eta_s": eta_s,
        "best": best_estimate(run, rows),
        "last_promoted": promoted[-1] if promoted else None,
    }


def _solitaire(row: dict, who: str) -> dict[str, Any] | None:
    """An iteration's solitaire measurement of ``who`` (``candidate`` or ``best``): mean, its
    standard error and boards from the record's detail (None where it has no such eval)."""
    detail = row.get("detail")
    ev = detail.get("eval") if isinstance(detail, dict) else None
    res = ev.get(who) if isinstance(ev, dict) else None
    if isinstance(res, dict) and isinstance(res.get("mean"), (int, float)):
        se = res.get("se")
        return {"mean": float(res["mean"]), "se": se if isinstance(se, (int, float)) else None,
                "boards": res.get("boards")}  # fmt: skip
    flat = row.get("solitaire_mean" if who == "candidate" else "best_solitaire_mean")
    return (
        None if not isinstance(flat, (int, float)) else {"mean": flat, "se": None, "boards": None}
    )


def best_estimate(run: Path, rows: list[dict]) -> dict[str, Any] | None:
    """The current best network's (``models/best.pt``) solitaire estimate, never a maximum over
    iterations (the best of many noisy 100-board estimates is biased up: a run whose figures
    peaked at 249.1, above the oracle's 248.4, scored 241.8 on 2,000 boards).

    ``yz eval RUN``'s measurement (``RUN/eval/best_eval.json``) when there is one (``source``
    ``yz eval``, with the win rate against the oracle; ``stale`` when ``best.pt`` changed since),
    else the last iteration's eval of the network that is best now: walking back from the last
    iteration, the candidate of the latest promotion, or the ``best`` measured at the start of an
    iteration after which nothing was promoted. None when it was never measured (or the run
    rolled back to an anchor since)."""
    from leaguezero.yatzy.train.best_eval import EVAL_FILE, read_best_eval

    measured = read_best_eval(run)
    if measured is not None:
        alone, match = measured.get("solitaire", {}), measured.get("vs_oracle", {})
        best_pt, eval_file = run / "models" / "best.pt", run / "eval" / EVAL_FILE
        try:
            stale = best_pt.stat().st_mtime > eval_file.stat().st_mtime
        except OSError:
            stale = False
        model = Path(str(measured.get("model", "best.pt"))).name  # a name, never a path
        return {
            "source": "yz eval", "mean": alone.get("mean"), "se": alone.get("se"),
            "boards": alone.get("boards"), "iteration": None, "model": model, "stale": stale,
            "vs_oracle": {k: match.get(k) for k in ("a_win_rate", "a_win_rate_se", "games")},
        }  # fmt: skip
    for row in reversed(rows):
        it = row.get("iteration")
        if row.get("promoted"):  # the candidate it measured is best.pt now
            found = _solitaire(row, "candidate")
            break
        if row.get("promotion_reason") == "rollback":  # the anchor: not measured as best here
            return None
        found = _solitaire(row, "best")  # the best at this iteration's start, unchanged since
        if found is not None:
            break
    else:
        return None
    if found is None:
        return None
    return {"source": "iteration", "iteration": it, "stale": False, **found}


def _planned_iterations(run: Path) -> int | None:
    """``run.iterations`` of the run's resolved ``config.yaml`` (None without one)."""
    import yaml

    try:
        cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
        return int(cfg["run"]["iterations"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def pfsp_shares(events_path: Path, last_steps: int = SHARE_STEPS) -> dict[str, Any]:
    """Shares of the opponents drawn, by PFSP bucket and by opponent, over the draws of the last
    ``last_steps`` steps that logged ``league.opponent_sampled`` events."""
    draws = list(read_events(events_path, OPPONENT_SAMPLED)) if events_path.exists() else []
    steps = sorted({d.get("step") for d in draws if d.get("step") is not None})[-last_steps:]
    recent = [d for d in draws if d.get("step") in set(steps)]
    total = len(recent)

    def shares(key: str) -> list[dict[str, Any]]:
        counts = Counter(str(d.get(key)) for d in recent)
        return [{"name": k, "draws": n, "share": n / total} for k, n in counts.most_common()]

    return {
        "steps": [int(s) for s in steps],
        "draws": total,
        "buckets": shares("bucket") if total else [],
        "opponents": shares("opponent") if total else [],
    }


def league_view(run: Path, recent: int = 10) -> dict[str, Any]:
    """The league table (ratings with intervals, sorted by rating; ``elo_relative``: relative to
    ``relative_to`` = base_model = 0, None without it), the run's metadata, PFSP
    shares and the ``recent`` last matches. Raises ValueError for a damaged league file."""
    from leaguezero.league.matchlog import MatchLogError
    from leaguezero.league.registry import RegistryError

    paths = evaluator_paths(run)
    try:
        state = LeagueRegistry(paths["registry"]).load()
        matches = read_matches(paths["matchlog"])[-recent:] if paths["matchlog"].exists() else []
    except (RegistryError, MatchLogError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(first.replace(str(run), run.name)) from None  # no path of this machine
    agents = sorted(state.agents.values(), key=lambda a: -a.elo)
    relative = relative_ratings(state.ratings())
    return {
        "metadata": state.metadata,
        "relative_to": None if relative is None else RELATIVE_TO,
        "agents": [
            {
                "name": a.name,
                "type": a.type.value,
                "elo": a.elo,
                "elo_relative": None if relative is None else relative[a.name],
                "low": a.elo_low,
                "high": a.elo_high,
                "matches": a.matches,
                "step": a.step,
                "parent": a.parent,
                "retired": bool(a.extra.get("retired")),
            }
            for a in agents
        ],
        "pfsp": pfsp_shares(paths["events"]),
        "recent_matches": [
            {
                "step": m.step,
                "kind": m.kind,
                "seats": [{"agent": p.agent, "score": p.score} for p in m.participants],
            }
            for m in reversed(matches)
        ],
        "has_elo_chart": paths["events"].exists(),
        "payoff": payoff_view(paths["matchlog"]),
    }


def elo_chart(run: Path, cache_dir: Path) -> Path:
    """The league's Elo chart (``plot_elo``) as a PNG in ``cache_dir``, redrawn when the run's
    events are newer. Raises FileNotFoundError when the run has no events yet."""
    events = evaluator_paths(run)["events"]
    if not events.exists():
        raise FileNotFoundError(f"run {run.name} has no events.ndjson yet")
    out = cache_dir / "elo.png"
    with _chart_lock:
        if not out.exists() or out.stat().st_mtime < events.stat().st_mtime:
            plot_elo(events, out)
    return out
