import itertools

import pytest

from leaguezero.common.config import load_config
from leaguezero.yatzy.config import YatzyConfig


def test_null_final_values_keep_the_rate_and_window_constant() -> None:
    train = load_config(YatzyConfig, None, ["train.lr_final=null", "train.window_final=null"]).train
    assert {train.lr_at(i, 30) for i in range(1, 31)} == {train.lr}
    assert {train.window_at(i, 30) for i in range(1, 31)} == {train.window_iterations}


def test_the_defaults_fall_and_grow_over_the_run() -> None:
    cfg = YatzyConfig()
    n = cfg.run.iterations
    assert cfg.train.lr_at(1, n) == pytest.approx(1e-3)
    assert cfg.train.lr_at(n, n) == pytest.approx(1e-4)
    assert (cfg.train.window_at(1, n), cfg.train.window_at(n, n)) == (4, 16)
    assert cfg.gate.continuous


def test_cosine_lr_and_growing_window_span_the_run() -> None:
    cfg = load_config(
        YatzyConfig,
        None,
        ["train.lr=0.001", "train.lr_final=0.0001", "train.window_iterations=2",
         "train.window_final=12", "run.iterations=11"],
    )  # fmt: skip
    lrs = [cfg.train.lr_at(i, 11) for i in range(1, 12)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)
    assert lrs[5] == pytest.approx(5.5e-4)  # the middle of a half cosine
    assert all(a > b for a, b in itertools.pairwise(lrs))
    windows = [cfg.train.window_at(i, 11) for i in range(1, 12)]
    assert windows[0] == 2 and windows[-1] == 12 and windows == sorted(windows)
    # Iterations past the run's end (a resumed run given more) stay at the final values.
    assert cfg.train.lr_at(40, 11) == pytest.approx(1e-4) and cfg.train.window_at(40, 11) == 12


def test_bad_schedule_values_are_refused() -> None:
    from leaguezero.common.config import ConfigError

    with pytest.raises(ConfigError, match=r"train\.lr_final"):
        load_config(YatzyConfig, None, ["train.lr_final=-1"])
