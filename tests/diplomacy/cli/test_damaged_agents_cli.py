"""Damaged Diplomacy checkpoints and adapter folders through the CLI (issue 41 items 4 and 6).

``diplomacy eval --hero`` and ``diplomacy train --init-from`` get every damaged input as one
line that names the file (rc != 0, no traceback, no torch advice such as ``weights_only``, no
bare exception text such as ``101`` or ``list index out of range``): a flipped byte in the
weights (caught by the checksum the file carries), truncations, a legacy-format file, pickles,
a torch file holding a list, lineage entries of the wrong shape.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("diplomacy")

from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig

runner = CliRunner()
FORBIDDEN = ("Traceback", "weights_only", "pickle.load", "index out of range", "enhancement")


def one_line_error(result, *expected: str) -> str:
    # transformers draws its own "Loading weights" bar while the base model loads
    lines = [line for line in result.output.splitlines() if "it/s]" not in line]
    output = "\n".join(lines).strip()
    assert result.exit_code != 0, output
    assert len(output.splitlines()) == 1 and len(output) < 400, output
    assert not any(bad in output for bad in FORBIDDEN), output
    assert not re.search(r": \d+\)?$", output), output  # a bare KeyError number
    for text in expected:
        assert text in output, output
    return output


def flip_weight_byte(path: Path, tensor: torch.Tensor) -> None:
    """Flip one bit inside ``tensor``'s bytes where the file stores them."""
    data = bytearray(path.read_bytes())
    needle = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()[:64]
    at = data.find(needle)
    assert at > 0
    data[at + 10] ^= 0x01
    path.write_bytes(bytes(data))


def policy_file(tmp_path: Path, name: str = "ckpt.pt", extra: dict | None = None) -> Path:
    policy = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=1)
    return policy.save(tmp_path / name, extra)


def torch_bytes(obj, **kwargs) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, **kwargs)
    return buffer.getvalue()


class Hostile:  # pickled, it names code to run
    def __reduce__(self):
        return (print, ("ran",))


def damaged_policies(tmp_path: Path) -> dict[str, Path]:
    good = policy_file(tmp_path, "good.pt")
    data = good.read_bytes()
    out = {}
    flipped = policy_file(tmp_path, "flipped.pt")
    weights = torch.load(flipped, weights_only=True)["state_dict"]
    flip_weight_byte(flipped, max(weights.values(), key=lambda t: t.numel()))
    out["flipped"] = flipped
    for fraction in (0.1, 0.5, 0.97):
        path = tmp_path / f"cut{fraction}.pt"
        path.write_bytes(data[: int(len(data) * fraction)])
        out[f"cut{fraction}"] = path
    legacy = torch.load(good, weights_only=True)
    legacy["config"] = {**legacy["config"], "extra_numpy": __import__("numpy").zeros(2)}
    (tmp_path / "legacy.pt").write_bytes(torch_bytes(legacy, _use_new_zipfile_serialization=False))
    out["legacy"] = tmp_path / "legacy.pt"
    (tmp_path / "code.pt").write_bytes(pickle.dumps(Hostile()))
    out["code"] = tmp_path / "code.pt"
    (tmp_path / "list.pt").write_bytes(torch_bytes([1, 2, 3]))
    out["list"] = tmp_path / "list.pt"
    for shape, lineage in (("str", "abc"), ("ints", [101, 102]), ("empty-list", [[]])):
        path = policy_file(tmp_path, f"lineage-{shape}.pt", {"step": 3, "lineage": lineage})
        out[f"lineage-{shape}"] = path
    return out


def test_damaged_policy_checkpoints_are_one_line_in_eval_and_init_from(tmp_path) -> None:
    cases = damaged_policies(tmp_path)
    for case, path in cases.items():
        if not case.startswith("lineage-"):  # eval ignores the lineage a checkpoint carries
            args = ["diplomacy", "eval", "--hero", str(path), "--opponents", "random_bot"]
            result = runner.invoke(app, [*args, "--games", "1", "--set", "max_years=1"])
            one_line_error(result, path.name)
        out = tmp_path / f"run-{case}"
        args = ["diplomacy", "train", "--init-from", str(path), "--out", str(out), "--quiet"]
        result = runner.invoke(app, [*args, "--set", "max_years=1", "--set", "train.steps=1"])
        one_line_error(result, path.name)
        assert not out.exists()
    message = one_line_error(
        runner.invoke(
            app,
            ["diplomacy", "eval", "--hero", str(cases["flipped"]), "--opponents", "random_bot"],
        )
    )
    assert "damaged" in message and "checksum" in message


def test_a_damaged_adapter_folder_is_one_line_in_eval_and_init_from(tmp_path) -> None:
    pytest.importorskip("peft")
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
    from tests.diplomacy.tiny_lm import build_tiny_lm

    tiny = build_tiny_lm(tmp_path / "tiny_lm")
    backend = HFBackend.from_pretrained(tiny)
    backend.add_adapter("src")
    with torch.no_grad():
        for param in backend.adapter_parameters("src").values():
            param.normal_(0.0, 0.05)
    good = backend.save_adapter("src", tmp_path / "good")
    meta = json.loads((good / "leaguezero_adapter.json").read_text())
    assert set(meta["sha256"]) == {"adapter_config.json", "adapter_model.safetensors"}
    from safetensors.torch import load_file

    flipped = backend.save_adapter("src", tmp_path / "flipped")
    weights = load_file(flipped / "adapter_model.safetensors")
    flip_weight_byte(flipped / "adapter_model.safetensors", next(iter(weights.values())))
    bad_lineage = backend.save_adapter("src", tmp_path / "bad_lineage")
    (bad_lineage / "lineage.json").write_text(json.dumps({"step": 1, "lineage": [7]}))
    llm = ["--set", f"llm.base_model={tiny}", "--set", "llm.max_new_tokens=4"]
    for folder in (flipped,):
        args = ["diplomacy", "eval", "--hero", str(folder), "--opponents", "random_bot"]
        result = runner.invoke(app, [*args, "--games", "1", "--set", "max_years=1", *llm])
        one_line_error(result, "damaged", "checksum")
    for folder in (flipped, bad_lineage):
        out = tmp_path / f"run-{folder.name}"
        args = ["diplomacy", "train", "--init-from", str(folder), "--out", str(out), "--quiet"]
        sets = ["--set", "train.agent=llm", "--set", "llm.lora_rank=8", "--set", "max_years=1"]
        result = runner.invoke(app, [*args, *sets, *llm, "--set", "train.steps=1"])
        one_line_error(result, folder.name)
