"""``leaguezero report RUN_DIR``: one self-contained HTML page about a Yatzy run.

Charts are PNGs embedded as base64 (no external files or scripts), so the page can be mailed or
opened from anywhere: learning curves, strength against greedy and the oracle, regret, the
solitaire score histogram against the oracle's, throughput, and the league's Elo chart when the
run trained in a league.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from leaguezero.common.atomic import atomic_write_text
from leaguezero.common.events import read_events

GREEDY_MEAN = 177.0  # measured: `yz oracle-eval`-style mirror games of the greedy bot
ORACLE_EXPECTED = 248.44


def _legend_outside(ax, handles=None, labels=None) -> None:
    """A legend to the right of the plot, so it never covers a point of data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0)  # fmt: skip


def _png(fig) -> str:
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, int | float):
            xs.append(r["iteration"])
            ys.append(float(v))
    return xs, ys


def _solitaire_series(rows: list[dict], key: str, who: str):
    """``_series(rows, key)`` with each point's standard error (``who``'s ``se`` in the
    record's ``detail.eval``; 0 where the record has none): (xs, ys, errors)."""
    xs, ys, errs = [], [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, int | float):
            detail = r.get("detail")
            ev = detail.get("eval", {}) if isinstance(detail, dict) else {}
            se = ev.get(who, {}).get("se") if isinstance(ev.get(who), dict) else None
            xs.append(r["iteration"])
            ys.append(float(v))
            errs.append(float(se) if isinstance(se, int | float) and np.isfinite(se) else 0.0)
    return xs, ys, errs


Chart = tuple[str, str, str]  # (title, PNG base64, what a good curve does)


def build_report(run_dir: str | Path, oracle_games: int = 4000) -> Path:
    """Write ``RUN_DIR/report.html`` and return its path. Raises FileNotFoundError if no run."""
    import matplotlib

    matplotlib.use("Agg")

    run = Path(run_dir)
    stats_path = run / "logs" / "iteration_stats.ndjson"
    if not stats_path.exists():
        raise FileNotFoundError(f"{run} has no logs/iteration_stats.ndjson: not a yz run directory")
    rows = [r for r in read_events(stats_path) if r.get("event") == "iteration"]
    charts = [
        _loss_chart(rows),
        _strength_chart(rows),
        _regret_chart(rows),
        _histogram_chart(run, oracle_games),
        _throughput_chart(rows),
        _league_chart(run),
    ]
    out = run / "report.html"
    atomic_write_text(out, _page(run, rows, [c for c in charts if c is not None]))
    return out


def _loss_chart(rows: list[dict]) -> Chart:
    import matplotlib.pyplot as plt

    # The turn search trains no policy head (its loss is 0 throughout): plot what is trained.
    # The value and margin losses share a panel: with train.q_weight 1 (the configs' default)
    # both heads regress to the same target q, so two panels drew the same curve twice.
    def trained(key: str) -> bool:
        return any((r.get(key) or 0) > 0 for r in rows)

    panels = [[("loss_policy", "policy CE")]] if trained("loss_policy") else []
    heads = [(k, label) for k, label in (("loss_value", "value"), ("loss_margin", "margin"))
             if trained(k)]  # fmt: skip
    if heads:
        panels.append(heads)
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5 * max(1, len(panels)), 3.2))
    for ax, panel in zip(np.atleast_1d(axes), panels, strict=False):
        for (key, label), marker in zip(panel, "os", strict=False):
            ax.plot(*_series(rows, key), marker=marker, label=label)
        title = panel[0][1] if panel[0][0] == "loss_policy" else "value and margin MSE"
        ax.set(xlabel="iteration", title=title)
        if len(panel) > 1:
            _legend_outside(ax)
    np.atleast_1d(axes)[0].set_ylabel("loss (last quarter of training)")
    fig.tight_layout()
    return (
        "Training losses", _png(fig),
        "What to expect: each loss is measured against targets that move (each iteration "
        "trains on newer self-play, whose values the better network computes), so a loss need "
        "not fall and may rise as games get sharper; a loss that jumps by an order of magnitude, "
        "or NaN, is the warning sign. The value and margin heads share a panel: with "
        "train.q_weight 1 (the default) both learn the same target (the search's value q), so "
        "their curves lie on each other; they part when q_weight < 1 blends in the outcome "
        "(the win for the value head, the score difference for the margin head). The turn "
        "search trains no policy head, so no policy loss is shown for it.",
    )  # fmt: skip


def _strength_chart(rows: list[dict]) -> Chart:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
    # Each point is a small sample (oracle_eval.games mirror games): its bar is ± one SE.
    for key, who, marker in (("solitaire_mean", "candidate", "o"),
                             ("best_solitaire_mean", "best", "s")):  # fmt: skip
        xs, ys, errs = _solitaire_series(rows, key, who)
        axes[0].errorbar(xs, ys, yerr=errs, marker=marker, capsize=2, label=f"{who} (± SE)")
    axes[0].axhline(ORACLE_EXPECTED, color="k", ls="--", label="oracle 248.44")
    axes[0].axhline(GREEDY_MEAN, color="gray", ls=":", label="greedy ~177")
    axes[0].set(xlabel="iteration", ylabel="points per board", title="Solitaire score")
    _legend_outside(axes[0])
    for key, label in (("win_rate_vs_greedy", "candidate vs greedy"),
                       ("win_rate_vs_oracle", "candidate vs oracle"),
                       ("gate_win_rate", "candidate vs best (gate)")):  # fmt: skip
        axes[1].plot(*_series(rows, key), marker="o", label=label)
    axes[1].axhline(0.5, color="k", lw=0.5)
    axes[1].set(xlabel="iteration", ylabel="win rate", ylim=(0, 1),
                title="Win rates of each iteration's candidate")  # fmt: skip
    _legend_outside(axes[1])
    fig.tight_layout()
    its, means = _series(rows, "solitaire_mean")
    start = f"from {means[0]:.0f} (iteration {its[0]}'s candidate) " if means else ""
    return ("Strength", _png(fig),
            f"Good: the solitaire score climbs {start}past greedy's 177 toward the "
            "oracle's 248; each point is a small sample (± one standard error), so the "
            "highest point overstates the run: yz eval RUN measures the best on 2,000 boards. "
            "The candidate's win rate against greedy rises past 0.5, "
            "and against the best it hovers near 0.5 (each is a small step).")  # fmt: skip


def _regret_chart(rows: list[dict]) -> Chart:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    regret = ax.plot(*_series(rows, "mean_regret_per_game"), marker="o", color="tab:red",
                     label="regret: expected points lost per board (left axis)")  # fmt: skip
    ax.set(xlabel="iteration", ylabel="expected points lost per board",
           title="Regret against the oracle")  # fmt: skip
    ax2 = ax.twinx()
    match = ax2.plot(*_series(rows, "oracle_match_rate"), marker="s", color="tab:blue", ls="--",
                     label="share of moves equal to the oracle's (right axis)")  # fmt: skip
    ax2.set_ylabel("oracle match rate", color="tab:blue")
    handles = regret + match
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left",
              bbox_to_anchor=(0.0, -0.22), borderaxespad=0.0)  # fmt: skip
    return ("Regret", _png(fig),
            "Good: the red regret curve falls toward 0 (perfect play) and the blue match "
            "rate rises toward 1.")  # fmt: skip


def _histogram_chart(run: Path, oracle_games: int) -> Chart | None:
    """The last evaluation's solitaire scores beside the oracle's (None: no evaluation yet)."""
    import matplotlib.pyplot as plt

    evals = sorted((run / "eval").glob("iter_*.json"))
    if not evals:
        return None
    scores = json.loads(evals[-1].read_text()).get("candidate", {}).get("scores")
    if not scores:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bins = np.arange(0, 380, 10)
    ax.hist(scores, bins=bins, alpha=0.6, density=True, label=f"candidate ({evals[-1].stem})")
    oracle_scores = _oracle_scores(oracle_games)
    if oracle_scores is not None:
        ax.hist(oracle_scores, bins=bins, alpha=0.5, density=True, label="oracle")
    ax.set(xlabel="final score of a board", ylabel="density", title="Score distribution")
    _legend_outside(ax)
    return ("Solitaire histogram", _png(fig),
            "Good: the candidate's scores move right until they overlap the "
            "oracle's distribution.")  # fmt: skip


def _throughput_chart(rows: list[dict]) -> Chart:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(*_series(rows, "sims_per_s"), marker="o")
    ax.set(xlabel="iteration", ylabel="simulations / s", title="Self-play search throughput")
    return ("Throughput", _png(fig),
            "Good: flat. A drop means the machine got busier or the network bigger, not "
            "that learning changed.")  # fmt: skip


def _league_chart(run: Path) -> Chart | None:
    """The league's Elo chart of a ``yz run --league`` run (docs/guides/yatzy_league.md), else
    None."""
    league_events = run / "events.ndjson"
    if not league_events.exists():
        return None
    from leaguezero.league.tracking import plot_elo

    png = plot_elo(league_events, run / "league_elo.png")
    return ("League Elo", base64.b64encode(png.read_bytes()).decode("ascii"),
            "Good: the hero's Elo rises above the past checkpoints and the "
            "baselines.")  # fmt: skip


def _page(run: Path, rows: list[dict], charts: list[Chart]) -> str:
    body = "\n".join(
        f"<h2>{html.escape(title)}</h2><img src='data:image/png;base64,{data}'>"
        f"<p class='good'>{html.escape(caption)}</p>"
        for title, data, caption in charts
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>leaguezero report: {html.escape(run.name)}</title>"
        "<style>body{font-family:sans-serif;max-width:1150px;margin:2em auto}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:right}img{max-width:100%}"
        "pre{white-space:pre-wrap}</style></head><body>"
        f"<h1>Run {html.escape(str(run))}</h1><p>{len(rows)} iterations. Config: "
        f"<code>{html.escape(str(run / 'config.yaml'))}</code>.</p>{_best_eval_box(run)}{body}"
        f"<h2>Iterations</h2>{_table(rows)}</body></html>"
    )


def _best_eval_box(run: Path) -> str:
    """``yz eval RUN``'s measurement of the best, in its own words; the per-iteration curves
    below are small noisy samples, and their maximum overstates the run."""
    from leaguezero.yatzy.train.best_eval import eval_lines, read_best_eval

    result = read_best_eval(run)
    if result is None:
        return (
            "<h2>The run's best, measured</h2><p>Not measured yet: <code>yz eval "
            f"{html.escape(str(run))}</code> plays it alone on 2,000 boards and against the "
            "oracle in 2,000 paired games (about 20 CPU-seconds), with standard errors.</p>"
        )
    text = html.escape("\n".join(eval_lines(result)))
    return f"<h2>The run's best, measured (yz eval)</h2><pre>{text}</pre>"


def _oracle_scores(games: int) -> np.ndarray | None:
    try:
        from leaguezero.yatzy.agents.oracle import simulate
        from leaguezero.yatzy.oracle.solver import load_oracle

        return simulate(load_oracle(), games, seed=0).scores
    except Exception:  # the report still works without the oracle table
        return None


def _table(rows: list[dict]) -> str:
    cols = [("iteration", "d"), ("promoted", ""), ("loss_total", ".3f"), ("gate_win_rate", ".3f"),
            ("gate_games", "d"), ("solitaire_mean", ".1f"), ("mean_regret_per_game", ".1f"),
            ("win_rate_vs_greedy", ".2f"), ("win_rate_vs_oracle", ".2f"),
            ("sims_per_s", ",.0f")]  # fmt: skip
    head = "".join(f"<th>{c}</th>" for c, _ in cols)
    body = []
    for r in rows:
        cells = []
        for c, fmt in cols:
            v = r.get(c)
            cells.append(format(v, fmt) if isinstance(v, int | float) and fmt else str(v))
        body.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"
