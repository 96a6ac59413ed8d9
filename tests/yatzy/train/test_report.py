"""`leaguezero report` (issue 16 item 11): legends that hide no data, a legend on the regret
chart, win rates that say which model played, and a sentence under each chart."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.yatzy.train import report as report_module


def _fake_run(root, policy_loss: bool = True):
    (root / "logs").mkdir(parents=True)
    rows = []
    for it in range(1, 6):
        rows.append({
            "event": "iteration", "iteration": it, "promoted": it % 2 == 0,
            "loss_policy": (3.0 - 0.1 * it) if policy_loss else 0.0,
            "loss_value": 0.9 - 0.05 * it, "loss_margin": 0.3,
            "loss_total": 4.0 - 0.2 * it, "gate_win_rate": 0.5 + 0.01 * it, "gate_games": 200,
            "solitaire_mean": 150 + 10 * it, "best_solitaire_mean": 145 + 10 * it,
            "mean_regret_per_game": 90 - 10 * it, "oracle_match_rate": 0.3 + 0.05 * it,
            "win_rate_vs_greedy": 0.2 + 0.1 * it, "win_rate_vs_oracle": 0.02 * it,
            "sims_per_s": 40000.0,
        })  # fmt: skip
    (root / "logs" / "iteration_stats.ndjson").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )


def test_report_charts_keep_every_point_visible_and_say_what_good_looks_like(tmp_path, monkeypatch):
    _fake_run(tmp_path)
    figures = []
    original = report_module._png

    def keep(fig):
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                figures.append((ax, legend.get_window_extent(), ax.get_window_extent()))
        figures.append(("fig", fig, [ax.get_title() for ax in fig.axes]))
        return original(fig)

    monkeypatch.setattr(report_module, "_png", keep)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    legends = [f for f in figures if f[0] != "fig"]
    titles = [t for f in figures if f[0] == "fig" for t in f[2]]
    assert len(legends) >= 3
    for _ax, legend_box, axes_box in legends:
        assert not legend_box.overlaps(axes_box), "a legend covers part of a plot"
    regret_axes = [f for f in figures if f[0] == "fig" and "Regret against the oracle" in f[2]]
    assert regret_axes and any(ax.get_legend() for ax in regret_axes[0][1].axes)
    assert "Win rates of each iteration's candidate" in titles
    labels = {t.get_text() for ax, _, _ in legends for t in ax.get_legend().get_texts()}
    assert {"candidate vs greedy", "candidate vs oracle"} <= labels
    page = (tmp_path / "report.html").read_text()
    assert page.count("<p class='good'>") == page.count("data:image/png;base64,")
    assert {"policy CE", "value and margin MSE"} <= set(titles)  # one panel: the same target
    assert "climbs from 160 (iteration 1" in page and "~50" not in page  # the data


def test_turn_search_report_shows_no_policy_loss_and_a_true_caption(tmp_path, monkeypatch):
    # The turn search trains no policy head: its loss is 0 throughout and is not plotted; the
    # caption does not promise that every loss falls (targets move).
    _fake_run(tmp_path, policy_loss=False)
    titles: list[str] = []
    original = report_module._png

    def keep(fig):
        titles.extend(ax.get_title() for ax in fig.axes)
        return original(fig)

    monkeypatch.setattr(report_module, "_png", keep)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "policy CE" not in titles and "value and margin MSE" in titles
    page = (tmp_path / "report.html").read_text()
    assert "every loss falls" not in page and "targets that move" in page
