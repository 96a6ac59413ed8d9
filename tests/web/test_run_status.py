"""The run page's "best network" (issue 55): the estimate of the network that is best now, with
its standard error, never the maximum of the iterations' noisy 100-board estimates; ``yz eval``'s
measurement (``RUN/eval/best_eval.json``) when the run has one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

from fastapi.testclient import TestClient

from leaguezero.web.app import WebSettings, create_app
from tests.web.fake_runs import LUCKY_MEAN, advance_yatzy_run, make_yatzy_run


def _status(run: Path) -> dict:
    client = TestClient(create_app(WebSettings(runs=[run])), base_url="http://localhost")
    assert client.get("/").status_code == 200  # the session cookie
    return client.get("/api/runs/0").json()["yatzy_status"]


def _rewrite_rows(run: Path, change) -> None:
    path = run / "logs" / "iteration_stats.ndjson"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_best_is_the_current_networks_estimate_not_the_maximum(tmp_path):
    run = make_yatzy_run(tmp_path / "run")  # 5 iterations; iteration 3's best sampled 249.1
    best = _status(run)["best"]
    # iteration 5 promoted nothing: best.pt is the network measured as "best" at its start
    assert best == {"source": "iteration", "iteration": 5, "stale": False, "mean": 195.0,
                    "se": 4.5, "boards": 100}  # fmt: skip
    assert best["mean"] != LUCKY_MEAN  # what the page showed before: the maximum, above 248.4
    advance_yatzy_run(run, 6)  # iteration 6 promoted its candidate: that one is best now
    assert _status(run)["best"] == {"source": "iteration", "iteration": 6, "stale": False,
                                    "mean": 210.0, "se": 4.6, "boards": 100}  # fmt: skip


def test_a_rollback_or_no_eval_is_not_measured(tmp_path):
    run = make_yatzy_run(tmp_path / "run")

    def no_evals_after_3(rows):
        for r in rows[3:]:
            r.pop("detail")
            r["best_solitaire_mean"] = r["solitaire_mean"] = None
            r["promoted"] = False

    _rewrite_rows(run, no_evals_after_3)  # the last measurement of the best is iteration 3's
    assert _status(run)["best"]["iteration"] == 3
    _rewrite_rows(run, lambda rows: rows[-1].update(promotion_reason="rollback"))
    assert _status(run)["best"] is None  # best.pt is the anchor now, not measured as such


def test_yz_evals_measurement_wins_and_says_when_it_is_stale(tmp_path):
    from leaguezero.yatzy.train.best_eval import SCHEMA_VERSION, write_best_eval

    run = make_yatzy_run(tmp_path / "run")
    (run / "models").mkdir()
    (run / "models" / "best.pt").write_bytes(b"weights")
    result = {
        "schema_version": SCHEMA_VERSION, "seed": 4905235, "model": str(run / "models/best.pt"),
        "solitaire": {"mean": 241.8, "se": 0.9, "boards": 2000},
        "oracle_solitaire": {"mean": 248.0, "se": 0.8, "boards": 2000},
        "vs_oracle": {"a_win_rate": 0.4735, "a_win_rate_se": 0.0074, "games": 2000},
    }  # fmt: skip
    path = write_best_eval(run, result)
    old = path.stat().st_mtime - 100
    os.utime(run / "models" / "best.pt", (old, old))
    best = _status(run)["best"]
    assert best == {
        "source": "yz eval",
        "mean": 241.8,
        "se": 0.9,
        "boards": 2000,
        "iteration": None,
        "model": "best.pt",
        "stale": False,
        "vs_oracle": {"a_win_rate": 0.4735, "a_win_rate_se": 0.0074, "games": 2000},
    }
    os.utime(run / "models" / "best.pt", (old + 200, old + 200))  # promoted after yz eval
    assert _status(run)["best"]["stale"] is True


def test_the_reports_solitaire_points_carry_error_bars(tmp_path, monkeypatch):
    """Each iteration's solitaire point is a 100-board sample: its bar is the record's SE."""
    from matplotlib.container import ErrorbarContainer

    from leaguezero.yatzy.train import report as report_module

    run = make_yatzy_run(tmp_path / "run")
    bars: dict[str, list[float]] = {}
    original = report_module._png

    def keep(fig):
        for ax in fig.axes:
            if ax.get_title() == "Solitaire score":
                for c in ax.containers:
                    if isinstance(c, ErrorbarContainer):
                        (segments,) = c.lines[2]
                        bars[c.get_label()] = [
                            (s[1][1] - s[0][1]) / 2 for s in segments.get_segments()
                        ]
        return original(fig)

    monkeypatch.setattr(report_module, "_png", keep)
    report_module.build_report(run, oracle_games=2)
    assert set(bars) == {"candidate (± SE)", "best (± SE)"}
    assert bars["best (± SE)"] == pytest.approx([4.1, 4.2, 4.3, 4.4, 4.5])
