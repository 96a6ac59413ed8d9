"""The small policy: legal orders in every phase, consistent log-probs, versioned checkpoints."""

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
from leaguezero.diplomacy.game.features import (
    NONE_LOC,
    ORDER_TYPE_INDEX,
    encode_order,
    location_index,
)
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.train.grpo import GRPOPolicy

torch.set_num_threads(1)


def test_orders_encode_to_type_and_locations() -> None:
    idx = location_index()
    assert encode_order("A PAR - BUR") == (
        ORDER_TYPE_INDEX["MOVE"],
        idx["PAR"],
        idx["BUR"],
        NONE_LOC,
    )
    assert encode_order("A MAR S A PAR - BUR") == (
        ORDER_TYPE_INDEX["SUPPORT_MOVE"],
        idx["MAR"],
        idx["BUR"],
        idx["PAR"],
    )
    assert encode_order("F ENG C A LON - BRE")[0] == ORDER_TYPE_INDEX["CONVOY"]
    assert encode_order("F STP/SC B")[:2] == (ORDER_TYPE_INDEX["BUILD_FLEET"], idx["STP/SC"])
    assert encode_order("WAIVE") == (ORDER_TYPE_INDEX["WAIVE"], NONE_LOC, NONE_LOC, NONE_LOC)
    with pytest.raises(ValueError, match="cannot encode"):
        encode_order("A XYZ - BUR")


def _self_play(policy: DiplomacyPolicy, years: int, seed: int):
    actors = []

    def resolve(_name):
        actor = policy.actor(seed=seed + len(actors))
        actors.append(actor)
        return actor

    cfg = DiplomacyConfig(max_years=years, games_dir=None, run={"seed": seed})
    result = run_rollout(cfg, 0, 0, dict.fromkeys(POWERS, "net"), "FRANCE", resolver=resolve)
    return result, [r for a in actors for r in a.records]


def test_policy_plays_only_legal_orders_in_every_phase_type() -> None:
    policy = DiplomacyPolicy(seed=0)
    assert isinstance(policy, GRPOPolicy)
    result, records = _self_play(policy, years=4, seed=3)
    assert sum(result.invalid_orders.values()) == 0
    assert sum(result.missing_orders.values()) == 0
    kinds = {r.phase[-1] for r in records}
    assert {"M", "A"} <= kinds  # movement and adjustment choices were both made
    assert all(r.old_log_prob <= 1e-6 for r in records)


def test_log_prob_recomputes_the_sampling_log_prob_with_gradients() -> None:
    policy = DiplomacyPolicy(seed=4)
    with torch.no_grad():  # a non-uniform policy, so the check is not trivially log(1/K)
        for p in policy.net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    _, records = _self_play(policy, years=2, seed=5)
    new = policy.log_prob(records)
    old = torch.tensor([r.old_log_prob for r in records])
    assert new.shape == (len(records),)
    assert torch.allclose(new, old, atol=1e-4)
    new.sum().backward()
    assert all(p.grad is not None for p in policy.net.order_out.parameters())


def test_checkpoint_round_trip_and_schema_checks(tmp_path) -> None:
    policy = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=6)
    path = policy.save(tmp_path / "ckpt_000001.pt")
    loaded = load_policy(path)
    _, records = _self_play(policy, years=1, seed=7)
    assert torch.allclose(loaded.log_prob(records), policy.log_prob(records))

    data = torch.load(path, weights_only=True)
    data["schema_version"] = 99
    buffer = io.BytesIO()
    torch.save(data, buffer)
    (tmp_path / "future.pt").write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="schema_version 99"):
        load_policy(tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_policy(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="network config"):
        DiplomacyPolicy(PolicyConfig(hidden=32), seed=0).load(path)
