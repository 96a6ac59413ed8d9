"""``yz bench`` runs every entry and reports positive rates."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from leaguezero.yatzy.cli.app import app


def test_bench_reports_every_entry():
    result = CliRunner().invoke(app, ["bench", "--seconds", "0.05", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert set(figures) == {"scoring", "legal", "puct", "protocol"}
    assert all(f["per_second"] > 0 and f["calls"] >= 1 for f in figures.values())


def test_bench_rejects_unknown_entries():
    result = CliRunner().invoke(app, ["bench", "--only", "nope"])
    assert result.exit_code == 2
