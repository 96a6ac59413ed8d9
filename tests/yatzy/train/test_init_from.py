"""`yz run --init-from`: training that continues from a shipped or saved network."""

from __future__ import annotations

import json
from pathlib import Path

from leaguezero.az.checkpoint import load_checkpoint
from leaguezero.yatzy.agents.registry import PRETRAINED_PATH
from leaguezero.yatzy.net.networks import MODEL_CONSTRUCTORS
from tests.in_process import yz_here

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "configs" / "yatzy_smoke.yaml"
TURN = ("--set", "search.kind=turn", "--set", "run.iterations=1")


def _lineage(checkpoint: Path) -> list[dict]:
    _, meta = load_checkpoint(checkpoint, MODEL_CONSTRUCTORS)
    return meta.extra["lineage"]


def test_a_run_continues_from_pretrained_and_its_checkpoints_carry_the_lineage(tmp_path):
    first = tmp_path / "first"
    result = yz_here("run", "--config", str(SMOKE), "--out", str(first), "--init-from",
                     "pretrained", *TURN)  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The initial best is the shipped network, byte for byte, and the config says its shape
    # (the smoke config's network is a 64-wide residual MLP; the shipped one is not).
    assert (first / "models" / "best_0000.pt").read_bytes() == PRETRAINED_PATH.read_bytes()
    _, shipped = load_checkpoint(PRETRAINED_PATH, MODEL_CONSTRUCTORS)
    written = (first / "config.yaml").read_text()
    arch = "board_towers" if "towers" in shipped.kind else "resmlp"
    assert f"arch: {arch}" in written and f"hidden: {shipped.kwargs['hidden']}" in written
    record = json.loads((first / "lineage.json").read_text())
    assert record["init_from"]["path"] == str(PRETRAINED_PATH.resolve())
    # The shipped network's own chain (the runs that made it) comes first.
    ancestors = shipped.extra.get("lineage", [])
    assert record["init_from"]["iteration"] == shipped.extra["iteration"]
    assert record["ancestors"] == ancestors
    before = [entry["run"] for entry in ancestors]
    chain = _lineage(first / "models" / "candidate_0001.pt")
    assert [entry["run"] for entry in chain] == [*before, str(first.resolve())]
    assert chain[-1]["init_from"]["sha256"] == record["init_from"]["sha256"]

    # A second session continues from the first one's candidate: the chain grows.
    second = tmp_path / "second"
    candidate = first / "models" / "candidate_0001.pt"
    result = yz_here("run", "--config", str(SMOKE), "--out", str(second), "--init-from",
                     str(candidate), *TURN)  # fmt: skip
    assert result.returncode == 0, result.stderr
    chain = _lineage(second / "models" / "candidate_0001.pt")
    assert [entry["run"] for entry in chain] == [
        *before,
        str(first.resolve()),
        str(second.resolve()),
    ]
    assert chain[-1]["init_from"]["path"] == str(candidate.resolve())


def test_init_from_refuses_what_cannot_seed_the_run_in_one_line_and_writes_nothing(tmp_path):
    # In process (the refusals come before any work; a subprocess each cost ~3 s of imports).
    from typer.testing import CliRunner

    from leaguezero.yatzy.cli.app import app

    def yz(*args: str):
        return CliRunner().invoke(app, list(args))

    out = tmp_path / "run"
    cases = {
        # A turn-search network for a PUCT run.
        ("--init-from", "pretrained"): "is a turn-search network",
        ("--init-from", "greedy"): "needs a network",
        ("--init-from", str(tmp_path / "missing.pt")): "does not exist",
        ("--init-from", "pretrained?depth=2"): "needs a network",
    }
    for args, message in cases.items():
        result = yz("run", "--config", str(SMOKE), "--out", str(out), *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr
        assert isinstance(result.exception, SystemExit)  # a refusal, not an error raised
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not out.exists()
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    result = yz("run", "--config", str(SMOKE), "--out", str(out), "--init-from", str(garbage),
                *TURN)  # fmt: skip
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert not out.exists()
    out.mkdir()
    (out / "config.yaml").write_text("schema_version: 1\n")
    result = yz("run", "--out", str(out), "--resume", "--init-from", "pretrained")
    assert result.exit_code == 2 and "starts a new run" in result.stderr
