"""Replay shards (atomic, versioned, schema-checked) and the trainer (fresh optimizer)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest
import torch

from leaguezero.az.replay import (
    Batch,
    ReplayError,
    ShardSchema,
    ShardWriter,
    complete_shards,
    games_on_disk,
    iteration_dir,
    load_window,
    read_shard,
    window_iterations,
)
from leaguezero.az.train import TrainSettings, train_candidate

SCHEMA = ShardSchema(1, 7, "test_actions", "test_rules", num_features=6, num_actions=5)


def _batch(n, seed=0):
    rng = np.random.default_rng(seed)
    legal = rng.random((n, 5)) < 0.7
    legal[:, 0] = True
    pi = rng.random((n, 5)) * legal
    pi /= pi.sum(axis=1, keepdims=True)
    return Batch(
        rng.standard_normal((n, 6)).astype(np.float32),
        legal.astype(np.uint8),
        pi.astype(np.float32),
        rng.choice([-1.0, 0.0, 1.0], n).astype(np.float32),
        np.tanh(rng.standard_normal(n)).astype(np.float32),
        np.tanh(rng.standard_normal(n)).astype(np.float32),
    )


def test_shards_round_trip_and_split(tmp_path):
    out = iteration_dir(tmp_path, 3)
    writer = ShardWriter(out, SCHEMA, worker=1, shard_samples=40)
    data = _batch(100)
    for lo in range(0, 100, 20):  # five "games" of 20 samples
        writer.add(Batch(*(getattr(data, k)[lo : lo + 20] for k in Batch.__dataclass_fields__)), 1)
    writer.flush()
    shards = complete_shards(out)
    assert [p.name for p in shards] == [f"shard_w01_0000{i}.safetensors" for i in range(3)]
    loaded = load_window(tmp_path, window_iterations(tmp_path, 3, 2), SCHEMA)
    for key in Batch.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(loaded, key), getattr(data, key))
    meta = json.loads(shards[0].with_name("shard_w01_00000.meta.json").read_text())
    assert meta["feature_schema_id"] == 7 and meta["shard_format_version"] == 2
    assert meta["games"] == 2 and games_on_disk(out) == 5  # shards end at game boundaries
    # A restarted writer continues the sequence instead of overwriting.
    again = ShardWriter(out, SCHEMA, worker=1, shard_samples=40)
    again.add(_batch(10, seed=1))
    assert again.flush().name == "shard_w01_00003.safetensors"


def test_schema_mismatch_and_version_are_clear_errors(tmp_path):
    writer = ShardWriter(tmp_path, SCHEMA, shard_samples=8)
    writer.add(_batch(8))
    path = complete_shards(tmp_path)[0]
    other = ShardSchema(1, 8, "test_actions", "test_rules", 6, 5)
    with pytest.raises(ReplayError, match="feature_schema_id=7 but 8 is required"):
        read_shard(path, other)
    meta = path.with_name("shard_w00_00000.meta.json")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "shard_format_version": 99}))
    with pytest.raises(ReplayError, match="format version 99"):
        read_shard(path, SCHEMA)
    with pytest.raises(ReplayError, match="no complete replay shards"):
        load_window(tmp_path / "empty", [0], SCHEMA)


def _write_forever(out):
    writer = ShardWriter(out, SCHEMA, shard_samples=2000)
    i = 0
    while True:
        writer.add(_batch(500, seed=i))
        i += 1


def test_killed_writer_never_corrupts_complete_shards(tmp_path):
    proc = mp.get_context("spawn").Process(target=_write_forever, args=(tmp_path,))
    proc.start()
    deadline = time.time() + 60
    while len(complete_shards(tmp_path)) < 3 and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    shards = complete_shards(tmp_path)
    assert len(shards) >= 3
    for path in shards:
        assert len(read_shard(path, SCHEMA)) == 2000


class _TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(6, 16)
        self.policy = torch.nn.Linear(16, 5)
        self.value = torch.nn.Linear(16, 1)
        self.margin = torch.nn.Linear(16, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return (
            self.policy(h),
            torch.tanh(self.value(h)).squeeze(-1),
            torch.tanh(self.margin(h)).squeeze(-1),
        )


def test_training_reduces_loss_and_is_a_pure_function_of_its_inputs():
    torch.manual_seed(0)
    best = _TinyNet()
    data = _batch(256)
    settings = TrainSettings(steps=200, batch_size=64, lr=3e-3, seed=5)

    def run():
        cand = _TinyNet()
        cand.load_state_dict(best.state_dict())
        report = train_candidate(cand, data, settings)
        return cand, report

    c1, r1 = run()
    c2, _ = run()
    assert r1.loss_total < r1.first_loss_total
    # Same start, same data, same seed -> same weights: no optimizer state leaks across calls.
    for p1, p2 in zip(c1.parameters(), c2.parameters(), strict=True):
        torch.testing.assert_close(p1, p2, rtol=0, atol=0)
    # And the best network itself is untouched.
    assert not torch.equal(next(c1.parameters()), next(best.parameters()))


def test_reusing_adam_moments_would_be_caught():
    """The check above has teeth: a warmed-up optimizer gives different weights."""
    torch.manual_seed(0)
    best = _TinyNet()
    data = _batch(256)
    settings = TrainSettings(steps=20, batch_size=64, lr=3e-3, seed=5)
    fresh = _TinyNet()
    fresh.load_state_dict(best.state_dict())
    train_candidate(fresh, data, settings)
    stale = _TinyNet()
    stale.load_state_dict(best.state_dict())
    opt = torch.optim.AdamW(stale.parameters(), lr=3e-3)
    for _ in range(5):  # moments from "a previous iteration"
        opt.zero_grad()
        stale(torch.from_numpy(data.features))[1].sum().backward()
        opt.step()
    stale.load_state_dict(best.state_dict())
    gen = torch.Generator().manual_seed(5)
    from leaguezero.az.train import losses

    for _ in range(20):
        idx = torch.randint(0, 256, (64,), generator=gen)
        p, v, m = losses(
            stale,
            torch.from_numpy(data.features)[idx],
            torch.from_numpy(data.legal)[idx].bool(),
            torch.from_numpy(data.pi)[idx],
            torch.from_numpy(data.z)[idx],
            torch.from_numpy(data.z_margin)[idx],
        )
        opt.zero_grad()
        (p + v + 0.25 * m).backward()
        opt.step()
    assert not torch.equal(next(fresh.parameters()), next(stale.parameters()))


@pytest.mark.parametrize("q_weight", [0.0, 1.0])
def test_q_weight_blends_outcome_and_root_value_targets(q_weight):
    """Value targets are (1 - q_weight) * outcome + q_weight * root value q."""
    torch.manual_seed(0)
    data = _batch(512, seed=3)
    data.z[:] = np.where(np.arange(512) % 2 == 0, 1.0, -1.0)  # outcomes average 0
    data.z_margin[:] = data.z
    data.q[:] = 0.5  # the root value says +0.5 everywhere
    net = _TinyNet()
    settings = TrainSettings(steps=300, batch_size=128, lr=1e-2, seed=1, q_weight=q_weight)
    train_candidate(net, data, settings)
    with torch.no_grad():
        _, value, margin = net(torch.from_numpy(data.features))
    want = 0.5 * q_weight
    assert float(value.mean()) == pytest.approx(want, abs=0.1)
    assert float(margin.mean()) == pytest.approx(want, abs=0.1)


# ------------------------------------------------------------------ damaged data (issue 16, item 2)
def _one_shard(tmp_path, n=8):
    writer = ShardWriter(tmp_path, SCHEMA, shard_samples=n)
    writer.add(_batch(n))
    return complete_shards(tmp_path)[0]


def _plant_nan_in_q(path):
    """Overwrite q[0] in the stored bytes: the file stays a valid safetensors file."""
    raw = path.read_bytes()
    at = raw.index(_batch(8).q[:2].tobytes())
    path.write_bytes(raw[:at] + np.float32(np.nan).tobytes() + raw[at + 4 :])


def test_corrupt_shard_payload_is_caught_by_its_checksum(tmp_path):
    path = _one_shard(tmp_path)
    _plant_nan_in_q(path)
    with pytest.raises(ReplayError, match=r"shard_w00_00000.safetensors is damaged.*checksum"):
        read_shard(path, SCHEMA)


def test_nan_in_a_shard_is_named_even_without_a_checksum(tmp_path):
    path = _one_shard(tmp_path)
    meta_path = path.with_name("shard_w00_00000.meta.json")
    meta = json.loads(meta_path.read_text())
    del meta["sha256"]  # e.g. written by an older build
    meta_path.write_text(json.dumps(meta))
    _plant_nan_in_q(path)
    with pytest.raises(ReplayError, match=r"damaged: 'q' holds NaN"):
        read_shard(path, SCHEMA)


@pytest.mark.parametrize("what", ["garbage", "truncated", "meta"])
def test_garbage_or_truncated_shard_is_a_one_line_error(tmp_path, what):
    path = _one_shard(tmp_path)
    meta_path = path.with_name("shard_w00_00000.meta.json")
    if what == "garbage":
        path.write_bytes(b"\xff" * 64)
    elif what == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        meta_path.write_text("{not json")
    meta = json.loads(meta_path.read_text()) if what != "meta" else None
    if meta is not None:  # skip the checksum so the payload itself must be diagnosed
        del meta["sha256"]
        meta_path.write_text(json.dumps(meta))
    with pytest.raises(ReplayError) as err:
        read_shard(path, SCHEMA)
    assert "damaged" in str(err.value) and "\n" not in str(err.value)


def test_trainer_stops_on_non_finite_data_and_loss():
    from leaguezero.az.train import TrainError

    data = _batch(64)
    data.z[3] = np.nan
    settings = TrainSettings(steps=5, batch_size=16, lr=1e-3)
    with pytest.raises(TrainError, match="'z' holds NaN"):
        train_candidate(_TinyNet(), data, settings)
    huge = TrainSettings(steps=50, batch_size=16, lr=1e30)
    with pytest.raises(TrainError, match="loss is not finite at step"):
        train_candidate(_TinyNet(), _batch(64), huge)
