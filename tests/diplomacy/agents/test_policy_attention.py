"""Attention over the map's locations (issue 53, item 4): a schema-3 checkpoint that round-trips
and trains, a network without it still written as schema 2, and bad files refused in one line."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.agents.policy import (
    CheckpointError,
    DiplomacyPolicy,
    PolicyConfig,
    load_policy,
)
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.game.rollout import run_rollout

torch.set_num_threads(1)
ATTENTION = PolicyConfig(hidden=16, layers=1, decoder="sequential", value_head=True, attention=2)


def _records(policy: DiplomacyPolicy, seed: int) -> list[ActionRecord]:
    actors = []

    def resolve(_name):
        actors.append(policy.actor(seed=seed + len(actors)))
        return actors[-1]

    cfg = DiplomacyConfig(max_years=1, games_dir=None, run={"seed": seed})
    result = run_rollout(cfg, 0, 0, dict.fromkeys(POWERS, "net"), "FRANCE", resolver=resolve)
    assert sum(result.invalid_orders.values()) == 0
    return [r for a in actors for r in a.records]


def _bad_file(tmp_path, data: dict, change: dict):
    buffer = io.BytesIO()
    torch.save({**data, **change}, buffer)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(buffer.getvalue())
    return bad


def test_attention_checkpoints_are_schema_3_and_play_and_score_as_saved(tmp_path) -> None:
    policy = DiplomacyPolicy(ATTENTION, seed=5)
    with torch.no_grad():  # attention that matters: the layer's output is not ~0 at init
        for p in policy.net.attention.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    path = policy.save(tmp_path / "attn.pt")
    data = torch.load(path, weights_only=True)
    assert data["schema_version"] == 3 and data["config"]["attention"] == 2
    loaded = load_policy(path)
    assert loaded.config == ATTENTION
    records = _records(policy, seed=3)
    assert records
    assert torch.allclose(loaded.log_prob(records), policy.log_prob(records))
    boards = [records[0].payload.board]
    assert torch.allclose(loaded.values(boards), policy.values(boards))

    # the layer changes what the network computes (it is not a no-op in the forward)
    plain = DiplomacyPolicy(PolicyConfig(16, 1, decoder="sequential", value_head=True), seed=5)
    plain.net.load_state_dict(
        {k: v for k, v in policy.net.state_dict().items() if not k.startswith("attention.")}
    )
    assert not torch.allclose(plain.log_prob(records), policy.log_prob(records))

    # a gradient reaches the attention weights
    policy.log_prob(records).sum().backward()
    grads = [p.grad for p in policy.net.attention.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_a_network_without_attention_is_still_written_as_schema_2(tmp_path) -> None:
    plain = DiplomacyPolicy(PolicyConfig(16, 1, decoder="sequential"), seed=1)
    path = plain.save(tmp_path / "a.pt")
    data = torch.load(path, weights_only=True)
    assert data["schema_version"] == 2 and "attention" not in data["config"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "unknown network settings \\['attention'\\]"),
        ({"config": {**ATTENTION.__dict__, "loc_embedding": 16, "attention": 3}}, "does not hold"),
        ({"config": {**ATTENTION.__dict__, "loc_embedding": 16, "attention": -1}}, "attention -1"),
        (
            {"config": {**ATTENTION.__dict__, "loc_embedding": 16, "attention": "2"}},
            "attention '2'",
        ),
    ],
)
def test_bad_attention_settings_are_refused_in_one_line(tmp_path, change, message) -> None:
    path = DiplomacyPolicy(ATTENTION, seed=2).save(tmp_path / "attn.pt")
    data = torch.load(path, weights_only=True)
    with pytest.raises(CheckpointError, match=message) as err:
        load_policy(_bad_file(tmp_path, data, change))
    assert "\n" not in str(err.value)


def test_a_run_init_from_an_attention_checkpoint_takes_its_shape(tmp_path) -> None:
    from leaguezero.common.config import load_config
    from leaguezero.diplomacy.train.network_hero import init_config

    path = DiplomacyPolicy(ATTENTION, seed=2).save(tmp_path / "attn.pt")
    cfg = init_config(load_config(DiplomacyConfig, None, []), path)
    assert (cfg.model.hidden, cfg.model.layers, cfg.model.attention) == (16, 1, 2)
