"""Damaged inputs end in one red line that says what to do, never a traceback (issue 16, item 5)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.replay import Batch, ShardWriter, complete_shards, iteration_dir
from leaguezero.cli import app
from leaguezero.common.config import write_resolved_config
from leaguezero.yatzy.agents.model import YATZY_SCHEMA
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.networks import MODEL_KIND, build_net
from leaguezero.yatzy.train.selfplay.puct import SHARD_SCHEMA

runner = CliRunner()


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = result.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text


def _best(path):
    net = build_net(hidden=16, blocks=1, margin_head=True, seed=0)
    save_checkpoint(path, net, kind=MODEL_KIND, kwargs=net.kwargs(), schema=YATZY_SCHEMA)
    return path


def _replay(root, n=16):
    rng = np.random.default_rng(0)
    f, a = SHARD_SCHEMA.num_features, SHARD_SCHEMA.num_actions
    legal = np.ones((n, a), np.uint8)
    batch = Batch(
        rng.standard_normal((n, f)).astype(np.float32), legal,
        np.full((n, a), 1.0 / a, np.float32), np.zeros(n, np.float32),
        np.zeros(n, np.float32), np.zeros(n, np.float32),
    )  # fmt: skip
    writer = ShardWriter(iteration_dir(root, 1), SHARD_SCHEMA, shard_samples=n)
    writer.add(batch, games=1)
    return complete_shards(iteration_dir(root, 1))[0]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "meta"])
def test_yz_train_on_a_damaged_shard(tmp_path, damage):
    shard = _replay(tmp_path / "replay")
    if damage == "garbage":
        shard.write_bytes(b"\x00" * 50)
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:200])
    else:
        shard.with_name(shard.name.replace(".safetensors", ".meta.json")).write_text("[1, 2")
    args = ["yatzy", "train", "--replay", str(tmp_path / "replay"), "--best",
            str(_best(tmp_path / "best.pt")), "--out", str(tmp_path / "cand.pt"),
            "--set", "search.kind=puct"]  # fmt: skip
    _one_line_error(runner.invoke(app, args), "damaged", shard.stem)
    assert not (tmp_path / "cand.pt").exists()


@pytest.mark.parametrize("content", ["{not json", "[]", '{"schema_version": 1}', ""])
def test_yz_run_resume_with_a_damaged_run_state(tmp_path, content):
    write_resolved_config(YatzyConfig(), tmp_path)
    (tmp_path / "run_state.json").write_text(content)
    result = runner.invoke(app, ["yatzy", "run", "--out", str(tmp_path), "--resume"])
    _one_line_error(result, "run_state.json is damaged")


@pytest.mark.parametrize("content", [b"", b"garbage", b"PK\x03\x04truncated zip"])
def test_bad_checkpoint_as_yz_train_best(tmp_path, content):
    (tmp_path / "best.pt").write_bytes(content)
    _replay(tmp_path / "replay")
    args = ["yatzy", "train", "--replay", str(tmp_path / "replay"), "--best",
            str(tmp_path / "best.pt"), "--out", str(tmp_path / "cand.pt")]  # fmt: skip
    result = runner.invoke(app, args)
    _one_line_error(result, "best.pt")
    assert "()" not in result.output and "weights_only=False" not in result.output


@pytest.mark.parametrize("content", [b"", b"garbage"])
def test_bad_checkpoint_as_diplomacy_eval_hero(tmp_path, content):
    pytest.importorskip("diplomacy")
    hero = tmp_path / "hero.pt"
    hero.write_bytes(content)
    args = ["diplomacy", "eval", "--hero", str(hero), "--opponents", "random_bot", "--games", "1"]
    result = runner.invoke(app, args)
    _one_line_error(result, "hero.pt is unreadable (")
    assert "()" not in result.output and "weights_only" not in result.output
