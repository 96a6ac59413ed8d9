from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from leaguezero.common.config import ConfigError, load_config, write_resolved_config
from leaguezero.yatzy.config import YatzyConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["yatzy_local_cpu.yaml", "yatzy_gpu.yaml"])
def test_shipped_configs_load_and_every_key_is_commented(name):
    path = CONFIGS / name
    load_config(YatzyConfig, path)
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "  # " in line, f"{name}: key without a comment: {line!r}"


def test_defaults_equal_local_cpu_file():
    assert load_config(YatzyConfig, CONFIGS / "yatzy_local_cpu.yaml") == YatzyConfig()


def test_overrides_are_typed():
    cfg = load_config(YatzyConfig, None, ["mcts.c_puct=2.5", "model.margin_head=false"])
    assert cfg.mcts.c_puct == 2.5 and cfg.model.margin_head is False


@pytest.mark.parametrize(
    "override, needle",
    [
        ("mcts.c_puct=-1", "mcts.c_puct: Input should be greater than 0 (got -1)"),
        ("mcts.cpuct=2", "mcts.cpuct: unknown key"),
        ("run.device=tpu", "run.device: Input should be 'cpu' or 'cuda'"),
        ("train.steps=many", "train.steps"),
        ("nonsense", "expected dotted.key=value"),
    ],
)
def test_bad_overrides_give_one_line_errors(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config(YatzyConfig, None, [override])
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_key_in_file_lists_allowed_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("gate:\n  threshhold: 0.6\n")
    with pytest.raises(
        ConfigError, match=r"gate\.threshhold: unknown key.*allowed keys.*threshold"
    ):
        load_config(YatzyConfig, path)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(YatzyConfig, tmp_path / "nope.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(YatzyConfig, bad)


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(YatzyConfig, None, ["run.seed=7"])
    path = write_resolved_config(cfg, tmp_path / "run")
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == 1
    assert load_config(YatzyConfig, path) == cfg


def test_inf_and_nan_are_refused_where_a_finite_number_is_meant():
    from leaguezero.yatzy.config import YatzyConfig

    for value in (".inf", "-.inf", ".nan", "inf", "nan"):
        with pytest.raises(ConfigError, match=r"train\.lr: .*finite"):
            load_config(YatzyConfig, None, [f"train.lr={value}"])


def test_a_renamed_key_loads_with_a_warning_and_the_input_is_not_modified():
    with pytest.warns(FutureWarning, match=r"run\.torch_threads .* run\.threads"):
        cfg = load_config(YatzyConfig, None, ["run.torch_threads=3"])
    assert cfg.run.threads == 3
    from leaguezero.common.config import move_renamed_keys

    data = {"a": {"old": 1}}
    with (
        pytest.warns(FutureWarning, match=r"x\.gone is retired and ignored"),
        pytest.warns(FutureWarning, match=r"a\.old .* b\.new"),
    ):
        moved = move_renamed_keys({**data, "x": {"gone": 2}}, {"a.old": "b.new"}, {"x.gone": "why"})
    assert moved == {"a": {}, "b": {"new": 1}, "x": {}} and data == {"a": {"old": 1}}


def test_shipped_yatzy_configs_use_the_current_names():
    """No renamed key and no reference to the external specification in configs/yatzy*.yaml."""
    for name in ("yatzy_local_cpu.yaml", "yatzy_gpu.yaml", "yatzy_smoke.yaml"):
        text = (CONFIGS / name).read_text()
        assert "torch_threads" not in text and "PRD" not in text, name
