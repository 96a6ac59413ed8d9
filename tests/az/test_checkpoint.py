"""az.checkpoint: atomic, versioned, weights_only, schema-checked; knows no game."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from leaguezero.az.checkpoint import (
    CheckpointError,
    SchemaIds,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)

SCHEMA = SchemaIds(feature_schema_id=7, action_space_id="space_v1", ruleset_id="rules_v1")


class TinyModel(nn.Module):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 2)


CONSTRUCTORS = {"tiny": TinyModel}


def _save(path, width: int = 3, schema: SchemaIds = SCHEMA):
    torch.manual_seed(0)
    model = TinyModel(width)
    save_checkpoint(path, model, kind="tiny", kwargs={"width": width}, schema=schema, train_step=4)
    return model


def test_round_trip_and_sidecar(tmp_path) -> None:
    path = tmp_path / "m.pt"
    model = _save(path, width=5)
    loaded, meta = load_checkpoint(path, CONSTRUCTORS, expect=SCHEMA)
    assert torch.equal(loaded.fc.weight, model.fc.weight) and not loaded.training
    assert meta.schema == SCHEMA and meta.train_step == 4 and meta.kwargs == {"width": 5}
    side = json.loads((tmp_path / "m.pt.meta.json").read_text())
    assert side["feature_schema_id"] == 7 and side["format_version"] == 1
    assert side["protocol_version"] == 1 and side["kind"] == "tiny"
    assert not list(tmp_path.glob("*.tmp"))  # atomic write left no temp files


def test_file_loads_with_weights_only(tmp_path) -> None:
    path = tmp_path / "m.pt"
    _save(path)
    blob = torch.load(path, weights_only=True)  # must not need pickled classes
    assert set(blob) == {"meta", "state_dict"}


def test_missing_file_is_clear(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt", CONSTRUCTORS)


@pytest.mark.parametrize(
    "other,field",
    [
        (SchemaIds(8, "space_v1", "rules_v1"), "feature_schema_id"),
        (SchemaIds(7, "space_v2", "rules_v1"), "action_space_id"),
        (SchemaIds(7, "space_v1", "rules_v2"), "ruleset_id"),
        (SchemaIds(7, "space_v1", "rules_v1", protocol_version=2), "protocol_version"),
    ],
)
def test_schema_mismatch_names_the_field(tmp_path, other: SchemaIds, field: str) -> None:
    path = tmp_path / "m.pt"
    _save(path)
    with pytest.raises(CheckpointError, match=field):
        load_checkpoint(path, CONSTRUCTORS, expect=other)


def test_wrong_format_version_and_garbage(tmp_path) -> None:
    path = tmp_path / "m.pt"
    _save(path)
    blob = torch.load(path, weights_only=True)
    blob["meta"]["format_version"] = 99
    torch.save(blob, path)
    with pytest.raises(CheckpointError, match="format_version 99"):
        read_checkpoint(path)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(path)


def test_unknown_kind_and_mismatched_weights(tmp_path) -> None:
    path = tmp_path / "m.pt"
    _save(path, width=3)
    with pytest.raises(CheckpointError, match="known: other"):
        load_checkpoint(path, {"other": TinyModel})
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(path, {"tiny": lambda width: TinyModel(width + 1)})


def test_damaged_weights_fail_the_checksum(tmp_path) -> None:
    path = tmp_path / "m.pt"
    _save(path)
    raw = path.read_bytes()
    state = torch.load(path, weights_only=True)["state_dict"]  # flip a bit of fc.bias
    needle = state["fc.bias"].numpy().tobytes()
    at = raw.index(needle)
    damaged = raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1 :]
    path.write_bytes(damaged)
    with pytest.raises(CheckpointError, match=r"damaged.*checksum"):
        read_checkpoint(path)


def test_nan_weights_and_empty_file_are_clear(tmp_path) -> None:
    path = tmp_path / "nan.pt"
    model = TinyModel()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("nan")
    save_checkpoint(path, model, kind="tiny", kwargs={"width": 3}, schema=SCHEMA)
    with pytest.raises(CheckpointError, match="NaN or infinite weights"):
        read_checkpoint(path)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is an empty file"):
        read_checkpoint(empty)


@pytest.mark.parametrize(
    "err",
    [
        KeyError(101),
        IndexError("list index out of range"),
        OSError(22, "Invalid argument"),
        RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central\n"
                     "directory. please report an enhancement request to PyTorch"),
        EOFError(),
        RuntimeError("Weights only load failed ... re-running with `weights_only` set to False"),
    ],
)  # fmt: skip
def test_torch_load_reasons_are_short_fixed_phrases(err) -> None:
    """Issue 41 item 6: torch's bare or advising messages never reach the user."""
    from leaguezero.az.checkpoint import torch_load_reason

    reason = torch_load_reason(err)
    assert "\n" not in reason and len(reason) < 80
    assert not any(bad in reason for bad in ("101", "index", "Errno", "weights_only", "PyTorch"))
    assert "damaged" in reason or "not a checkpoint" in reason
