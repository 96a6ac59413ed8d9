"""`leaguezero llm imitate` at toy size: an adapter that learns a teacher's orders.

A tiny base (test_llm_pretrain's recipe) and a few games show the pieces: the teacher's answers
get likelier under the adapter than under the base, the saved folder alone carries that (loaded
on a fresh copy of the base), it fits ``--init-from`` and carries its lineage, and the command
plays the shipped policy as teacher and refuses bad input in one line.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.config import HERO_KINDS
from leaguezero.diplomacy.game.catalogue import PRETRAINED_DIR, PRETRAINED_FILE
from leaguezero.diplomacy.llm.base.imitate import (
    REPORT_FILE,
    AdapterImitationSettings,
    answer_nll,
    imitate,
)
from leaguezero.diplomacy.llm.base.pretrain import collect_examples
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.model.hf_lora import LLAMA_PROJECTIONS, LoraSettings
from leaguezero.diplomacy.llm.remote.adapters import check_adapter_fits
from leaguezero.diplomacy.train.lineage import resolve_init_from
from tests.diplomacy.tiny_lm import build_tiny_base

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base") / "model"
    return build_tiny_base(folder)[0]


def test_imitation_adapter_learns_the_teacher_and_leaves_the_base(base, tmp_path) -> None:
    settings = AdapterImitationSettings(
        teacher="dumb_bot", seats=("dumb_bot", "random_bot"), games=3, max_years=1, steps=30,
        batch_tokens=2048, lr=1e-2, warmup=2, held_out=6, seed=5, lora_rank=8, lora_alpha=16.0,
    )  # fmt: skip
    lines: list[str] = []
    out = tmp_path / "adapter"
    report = imitate(base, out, settings, log=lines.append)
    held = report["held_out"]
    assert held["adapter"]["answer_nll"] < held["base"]["answer_nll"] - 0.1
    assert report["examples"]["train"] > 0 and report["trainable_parameters"] > 0
    assert any("held-out, base" in line for line in lines)
    # A normal adapter folder: loaded alone on a fresh copy of the base, it carries what was
    # learned (the teacher's answers of other games are likelier than under the base), it fits
    # a run of the same LoRA shape, and holds the lineage a GRPO run started from it continues.
    backend = HFBackend.from_pretrained(base)
    backend.load_adapter("imitated", out)
    fresh = collect_examples(
        2, max_years=1, seat_bots=("dumb_bot",), record_bots=("dumb_bot",), seed=99
    )
    assert answer_nll(backend, fresh, "imitated") < answer_nll(backend, fresh, None) - 0.1
    lora = LoraSettings(rank=8, alpha=16.0, target_modules=list(LLAMA_PROJECTIONS))
    check_adapter_fits(out, lora)
    source = resolve_init_from(str(out), HERO_KINDS["llm"])
    (entry,) = source.record["ancestors"]
    assert entry["imitation"]["teacher"] == "dumb_bot"
    assert "--teacher dumb_bot" in entry["imitation"]["command"]
    assert json.loads((out / REPORT_FILE).read_text())["settings"]["steps"] == 30
    with pytest.raises(FileExistsError):
        imitate(base, out, settings, log=lambda _: None)


@pytest.mark.skipif(
    not (PRETRAINED_DIR / PRETRAINED_FILE).exists(), reason="the shipped policy is not installed"
)
def test_imitate_command_plays_the_shipped_policy_as_teacher(base, tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "a"
    args = ["llm", "imitate", "--base-model", str(base), "--out", str(out), "--games", "1",
            "--max-years", "1", "--steps", "2", "--batch-tokens", "2048",
            "--held-out", "2"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["out"] == str(out) and (out / "adapter_model.safetensors").exists()
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["settings"]["teacher"] == "pretrained"
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "exists" in again.output
    bad = runner.invoke(app, [*args[:5], str(tmp_path / "b"), "--teacher", "greedy_bot"])
    assert bad.exit_code == 2 and "not among --seats" in bad.output
    unknown = runner.invoke(
        app, [*args[:5], str(tmp_path / "c"), "--teacher", "x", "--seats", "x,dumb_bot"]
    )
    assert unknown.exit_code == 2 and "unknown agent" in unknown.output


@pytest.mark.skipif(
    not (PRETRAINED_DIR / "llm" / "adapter" / "adapter_config.json").exists(),
    reason="the shipped LLM agent is not installed",
)
def test_shipped_pretrained_llm_plays_in_the_mode_it_was_trained_in() -> None:
    report = json.loads((PRETRAINED_DIR / "llm" / "adapter" / REPORT_FILE).read_text())
    assert report["settings"]["teacher"] == "pretrained"
    lineage = json.loads((PRETRAINED_DIR / "llm" / "adapter" / "lineage.json").read_text())
    assert lineage["lineage"][0]["imitation"]["command"].startswith("leaguezero llm imitate")
    result = CliRunner().invoke(
        app,
        ["diplomacy", "eval", "--hero", "pretrained-llm", "--opponents", "dumb_bot", "--games",
         "1", "--seed", "3", "--set", "max_years=1", "--no-save", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    played = json.loads(result.stdout.strip().splitlines()[-1])
    assert played["games"] == 1 and played["invalid_orders"] == 0  # constrained by default


def test_imitation_saves_the_adapter_before_its_bounded_check(base, tmp_path, monkeypatch):
    """The adapter and its report are on disk before the held-out check starts (a run stopped
    while checking keeps what it trained), and the check's answers obey ``check_tokens``."""
    from leaguezero.diplomacy.llm.base import imitate as module

    budgets: list[int] = []
    real_validity = module.order_validity

    def spy_validity(*args, **kwargs):
        budgets.append(kwargs["max_new_tokens"])
        assert kwargs["deadline"] is not None
        return real_validity(*args, **kwargs)

    def interrupted(*args, **kwargs):
        spy_validity(*args, **kwargs)
        raise KeyboardInterrupt  # the user stops the run during the check

    monkeypatch.setattr(module, "order_validity", interrupted)
    settings = AdapterImitationSettings(
        teacher="dumb_bot", seats=("dumb_bot",), games=1, max_years=1, steps=3,
        batch_tokens=2048, lr=1e-3, warmup=1, held_out=2, seed=1, check_tokens=7,
    )  # fmt: skip
    out = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        imitate(base, out, settings, log=lambda _: None)
    assert (out / "adapter_model.safetensors").is_file()
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["held_out"] is None and report["steps_done"] == 3
    assert budgets == [7]
    HFBackend.from_pretrained(base).load_adapter("kept", out)  # a usable adapter


def test_imitation_stops_training_at_its_time_budget(base, tmp_path):
    """``max_minutes``: a run with more steps than fit stops after the step that passes the
    budget and says how far it got (here a budget of 0.1 s: one step)."""
    settings = AdapterImitationSettings(
        teacher="dumb_bot", seats=("dumb_bot",), games=1, max_years=1, steps=10_000,
        batch_tokens=2048, lr=1e-3, warmup=1, held_out=2, seed=1, max_minutes=0.1 / 60,
        check_minutes=0.0,
    )  # fmt: skip
    lines: list[str] = []
    report = imitate(base, tmp_path / "short", settings, log=lines.append)
    assert 1 <= report["steps_done"] < 10_000
    assert any("--max-minutes reached" in line for line in lines)
    assert report["held_out"]["adapter"]["prompts"] == 0  # no time left for the check
