"""The Diplomacy config: the shipped YAML is current, overrides validate with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.common.config import ConfigError, commented_yaml, load_config
from leaguezero.diplomacy.cli.app import CONFIG_HEADER
from leaguezero.diplomacy.config import DiplomacyConfig

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "diplomacy_local_cpu.yaml"


def test_shipped_config_loads_and_is_regenerated_text() -> None:
    cfg = load_config(DiplomacyConfig, SHIPPED)
    # A changed field (name, default, description) must come with a regenerated file:
    # leaguezero diplomacy config write configs/diplomacy_local_cpu.yaml
    assert SHIPPED.read_text(encoding="utf-8") == commented_yaml(cfg, CONFIG_HEADER)
    for line in SHIPPED.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            assert "  # " in line, f"undocumented key: {line}"


def test_bad_values_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="max_years") as err:
        load_config(DiplomacyConfig, None, ["max_years=0"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(DiplomacyConfig, None, ["max_yaers=3"])


def test_play_command_saves_a_game(tmp_path) -> None:
    pytest.importorskip("diplomacy")
    agents = "greedy_bot,random_bot,chaos_bot,random_bot,random_bot,chaos_bot,random_bot"
    out = CliRunner().invoke(
        app,
        [
            "diplomacy",
            "play",
            "--agents",
            agents,
            "--hero-power",
            "austria",
            "--set",
            "max_years=1",
            "--out-dir",
            str(tmp_path),
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["hero_power"] == "AUSTRIA" and summary["hero_steps"] >= 2
    assert Path(summary["saved_game"]).exists()


def test_renamed_keys_load_with_a_warning_under_their_new_names(tmp_path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "seed: 3\nelo_k: 16\ntrain:\n  seed: 3\n  threads: 2\n  hidden: 16\n  layers: 1\n"
        "llm:\n  bf16_autocast: true\n  lora_dropout: 0.1\n"
    )
    with pytest.warns(FutureWarning) as caught:
        cfg = load_config(DiplomacyConfig, old)
    messages = " | ".join(str(w.message) for w in caught)
    for name in ("train.threads", "train.hidden", "llm.bf16_autocast", "llm.lora_dropout"):
        assert name in messages
    assert (cfg.run.seed, cfg.run.threads, cfg.league.elo_k) == (3, 2, 16)
    assert (cfg.model.hidden, cfg.model.layers) == (16, 1)
    # the same through --set, and an old key that contradicts its new name is an error
    with pytest.warns(FutureWarning, match=r"train\.hidden .* model\.hidden"):
        assert load_config(DiplomacyConfig, None, ["train.hidden=8"]).model.hidden == 8
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match=r"keep only run\.seed"):
        load_config(DiplomacyConfig, None, ["seed=1", "train.seed=2"])
