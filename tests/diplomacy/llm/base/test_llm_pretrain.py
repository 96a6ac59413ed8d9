"""`leaguezero llm pretrain` at toy size, ranking mode, and LLM folders as evaluation agents.

The real build (minutes) is documented in docs/guides/llm.md; here a few bot games and steps show
the pieces: the corpus pairs are the prompts the loop shows with legal answers in the prompt's
order, the saved folder loads back as a plain Hugging Face model with a chat template (no
LoRA keys leak into it), training lowers the answer loss, ranking mode only gives legal
orders, and the eval command plays a base folder.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.llm.base.corpus import answer_text, collect_examples
from leaguezero.diplomacy.llm.base.pretrain import BASE_META, read_base_meta
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.prompt import extract_orders, render_prompt
from leaguezero.diplomacy.llm.orders.ranking import rank_orders
from tests.diplomacy.tiny_lm import build_tiny_base

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base") / "model"
    return build_tiny_base(folder)


def test_corpus_pairs_are_the_loops_prompts_with_legal_answers_in_order() -> None:
    examples = collect_examples(2, max_years=1, seed=3)
    assert examples and {e.bot for e in examples} <= {"greedy_bot", "chaos_bot"}
    for e in examples:
        lines = e.answer.splitlines()
        assert lines[-1] == "END" and e.prompt.endswith("ORDERS:\n")
        parsed = extract_orders(e.answer, e.legal, e.phase_type, e.owed)
        assert parsed.invalid == 0 and len(parsed.parsed) == len(lines) - 1
    legal = {"PAR": ["A PAR - BUR", "A PAR H"], "BRE": ["F BRE H"]}
    assert answer_text(["A PAR H", "F BRE H"], legal) == "1) F BRE H\n2) A PAR H\nEND"
    builds = {"MAR": ["A MAR B", "WAIVE"], "PAR": ["A PAR B", "WAIVE"]}
    assert answer_text(["A PAR B"], builds) == "1) A PAR B\nEND"


def test_pretrained_folder_loads_as_a_plain_model_with_a_chat_template(base) -> None:
    folder, report = base
    assert report["loss_curve"][-1]["loss"] < 6.0
    assert read_base_meta(folder)["validity"]["owed"] > 0
    keys = load_file(folder / "model.safetensors").keys()
    assert not any("lora" in k or "base_layer" in k for k in keys)
    backend = HFBackend.from_pretrained(folder)
    rendered = render_prompt(backend.tokenizer, "hello")
    assert rendered.startswith("<|user|>\nhello") and rendered.endswith("<|assistant|>\n")
    meta = json.loads((folder / BASE_META).read_text())
    meta["schema_version"] = 99
    (folder / BASE_META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="schema_version"):
        read_base_meta(folder)
    meta["schema_version"] = 1
    (folder / BASE_META).write_text(json.dumps(meta))


def test_ranking_mode_gives_only_legal_orders(base) -> None:
    backend = HFBackend.from_pretrained(base[0])
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("FRANCE")
    prompt = render_prompt(backend.tokenizer, "Diplomacy")
    orders, text = rank_orders(backend, prompt, legal, adapter=None, phase_type="M")
    assert len(orders) == len(legal) and text.endswith("END")
    assert all(any(o in options for options in legal.values()) for o in orders)
    builds = {"PAR": ["A PAR B", "F PAR B", "WAIVE"], "MAR": ["A MAR B", "WAIVE"]}
    picked, _ = rank_orders(
        backend, prompt, builds, adapter=None, phase_type="A", owed=2, temperature=1.0
    )
    assert len(picked) == 2
    sites = [o.split()[1] for o in picked if o != "WAIVE"]
    assert len(sites) == len(set(sites))


def test_eval_command_plays_a_base_folder_in_both_modes(base) -> None:
    runner = CliRunner()
    for extra in ([], ["--rank"]):
        result = runner.invoke(
            app,
            ["diplomacy", "eval", "--hero", str(base[0]), "--opponents", "random_bot",
             "--games", "1", "--seed", "4", "--set", "max_years=1", "--set",
             "llm.max_new_tokens=16", "--no-save", "--json", *extra],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["games"] == 1
    bad = runner.invoke(app, ["llm", "pretrain", "--out", "x", "--record", "nobody_bot"])
    assert bad.exit_code == 2 and "unknown bot" in bad.output


def test_pretrain_command_uses_one_thread_unless_told(monkeypatch, tmp_path) -> None:
    # On a shared 2-core machine torch's default (every core) collapsed a build to 0.12
    # steps/s against 0.6 with one thread (docs/guides/llm.md#5-threads-that-fit-the-machine).
    import leaguezero.diplomacy.llm.base.pretrain as pretrain_module

    seen = []

    def fake_build(out, settings, log, overwrite):
        seen.append(settings.threads)
        return {"parameters": 1, "validity": {"valid_rate": 0.0}, "seconds": {"total": 0.0}}

    monkeypatch.setattr(pretrain_module, "pretrain", fake_build)
    runner = CliRunner()
    for extra in ([], ["--threads", "0"], ["--threads", "3"]):
        result = runner.invoke(app, ["llm", "pretrain", "--out", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
    assert seen == [1, 0, 3]  # 0 still means torch's default
    bad = runner.invoke(app, ["llm", "pretrain", "--out", str(tmp_path), "--threads", "-1"])
    assert bad.exit_code == 2
