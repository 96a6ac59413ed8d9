"""The fixed benchmark suite: one tournament per entry, floors, the JSON report."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bench import (
    DEFAULT_SUITE,
    PARITY,
    BenchEntry,
    bench_report,
    run_bench,
    suite_with_checkpoints,
)
from leaguezero.diplomacy.game.catalogue import parse_agents


def test_default_suite_tiers_and_checkpoints() -> None:
    assert [e.agent for e in DEFAULT_SUITE] == ["random_bot", "chaos_bot", "greedy_bot", "dumb_bot"]
    assert DEFAULT_SUITE[0].tier == "trivial" and DEFAULT_SUITE[0].floor == 0.95
    suite = suite_with_checkpoints(["runs/a/ckpt_000100.pt"])
    assert suite[-1] == BenchEntry("runs/a/ckpt_000100.pt", "checkpoint", PARITY)


def test_bench_rows_pass_and_fail_by_floor() -> None:
    cfg = DiplomacyConfig(run={"seed": 4}, max_years=3, games_dir=None)
    suite = (BenchEntry("random_bot", "trivial", 0.95), BenchEntry("dumb_bot", "heuristic", 0.99))
    seen: list[str] = []
    hero, *opponents = parse_agents(["dumb_bot", *(e.agent for e in suite)])
    agents = {spec.name: spec for spec in opponents}
    rows = run_bench(
        cfg, hero, suite, games=7, agents=agents, on_game=lambda agent, _: seen.append(agent)
    )
    assert seen == ["random_bot"] * 7 + ["dumb_bot"] * 7
    easy, mirror = rows
    assert easy.games == 7 and easy.win_rate >= 0.95 and easy.passed and easy.survival == 1.0
    assert easy.mean_centers > 5 and easy.invalid_orders == 0
    # Against six copies of itself no agent wins 99% of its games.
    assert not mirror.passed and mirror.win_rate < 0.99
    assert 0 < mirror.win_se < 0.5
    report = bench_report("dumb_bot", cfg.run.seed, 7, rows)
    assert report["passed"] is False and report["schema_version"] == 2
    # 7 of 7 against random_bot is 0.65-1.0: not yet a pass of the 0.95 floor.
    assert easy.verdict == "inconclusive" and mirror.verdict == "fail"
    assert report["verdict"] == "fail"
    assert [r["agent"] for r in report["rows"]] == ["random_bot", "dumb_bot"]


def test_empty_suite_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        run_bench(DiplomacyConfig(games_dir=None), parse_agents(["dumb_bot"])[0], (), 1, agents={})


def test_bench_command_json_and_table(tmp_path) -> None:
    from typer.testing import CliRunner

    from leaguezero.cli import app

    runner = CliRunner()
    args = ["diplomacy", "bench", "--hero", "dumb_bot", "--games", "7", "--set", "max_years=1"]
    result = runner.invoke(app, [*args, "--json", "--checkpoint", "greedy_bot"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    agents = [row["agent"] for row in report["rows"]]
    assert agents == ["random_bot", "chaos_bot", "greedy_bot", "dumb_bot", "greedy_bot"]
    assert report["rows"][-1]["tier"] == "checkpoint" and report["games_per_opponent"] == 7
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "dumb_bot" in table.stdout and "floor" in table.stdout


def test_bench_command_bad_hero_is_one_line() -> None:
    from typer.testing import CliRunner

    from leaguezero.cli import app

    result = CliRunner().invoke(app, ["diplomacy", "bench", "--hero", "smart_bot"])
    assert result.exit_code != 0
    assert "unknown agent" in result.output and "Traceback" not in result.output
