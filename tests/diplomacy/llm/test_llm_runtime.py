"""The LLM runtime (:mod:`leaguezero.diplomacy.llm.runtime`): the one place a process's model
is built, a process that samples on a server loads no weights, and command-line agents share
one base model per process (the web app's games)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

from typer.testing import CliRunner

from leaguezero.cli import app

SRC = Path(__file__).resolve().parents[3] / "src" / "leaguezero"
RUNTIME = SRC / "diplomacy" / "llm" / "runtime.py"
# Constructions that choose where a model runs: only the runtime makes them.
BUILDERS = {"HFBackend", "HFBackend.from_pretrained", "OpenAIClient", "BatchingGenerator"}


def _constructions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node.func)}("
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in BUILDERS
    ]


def test_only_the_runtime_builds_backends_clients_and_batchers():
    offenders = [c for p in SRC.rglob("*.py") if p != RUNTIME for c in _constructions(p)]
    assert not offenders, "build these in llm/runtime.py:\n" + "\n".join(offenders)
    # Not vacuous: the runtime itself makes each of them.
    found = {c.split(" ", 1)[1].removesuffix("(") for c in _constructions(RUNTIME)}
    assert found == BUILDERS - {"HFBackend"}  # it loads with from_pretrained


@pytest.fixture
def fresh_runtimes(monkeypatch):
    from leaguezero.diplomacy.llm import runtime

    monkeypatch.setattr(runtime, "_SHARED", {})  # no runtime kept from another test
    return runtime


def test_eval_through_a_server_loads_the_tokenizer_only(
    tiny_lm, adapter_dirs, fresh_runtimes, monkeypatch, tmp_path
):
    from leaguezero.diplomacy.config import LLMSection
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
    from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
    from leaguezero.diplomacy.llm.serve.server import LLMServer

    server = LLMServer(HFBackend.from_pretrained(tiny_lm, model_name="tiny")).start()
    try:

        def no_weights(*args, **kwargs):
            raise AssertionError("a client that samples on a server loaded model weights")

        import transformers

        monkeypatch.setattr(HFBackend, "from_pretrained", no_weights)
        monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
        adapter = adapter_dirs["austria-v0001"]
        args = [
            "diplomacy", "eval", "--hero", adapter, "--opponents", "random_bot", "--games", "1",
            "--set", "max_years=1", "--set", "llm.max_new_tokens=8", "--set", "llm.backend=openai",
            "--set", f"llm.endpoint={server.url}", "--set", f"llm.base_model={tiny_lm}",
            "--no-save", "--json",
        ]  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["hero_llm"]["answers"] >= 2
        with OpenAIClient(server.url) as client:  # played on the server, under its folder's name
            assert fresh_runtimes.folder_adapter_name(adapter) in client.list_adapters()

        # The league evaluator of an openai run: the server's client and the tokenizer alone.
        llm = LLMSection(backend="openai", endpoint=server.url, base_model=str(tiny_lm))
        evaluator = fresh_runtimes.LLMRuntime(llm)
        assert evaluator.backend is None and evaluator.sampler is evaluator.client
        assert evaluator.tokenizer is not None
        evaluator.close()
    finally:
        server.shutdown()


def test_command_agents_share_one_base_model_per_process(
    tiny_lm, adapter_dirs, fresh_runtimes, monkeypatch
):
    from leaguezero.diplomacy.config import LLMSection
    from leaguezero.diplomacy.game.catalogue import parse_agents
    from leaguezero.diplomacy.llm.resolvers import folder_resolver

    loads = []
    load = fresh_runtimes.load_backend

    def counted(path, **options):
        loads.append(path)
        return load(path, **options)

    monkeypatch.setattr(fresh_runtimes, "load_backend", counted)
    llm = LLMSection(base_model=str(tiny_lm))
    one, two = (parse_agents([folder]) for folder in adapter_dirs.values())
    # Two games of the web app (another system prompt in the second): one base model.
    assert folder_resolver(one, llm, seed=0, greedy=True) is not None
    other = llm.model_copy(update={"system_prompt": "diplomacy"})
    assert folder_resolver(two, other, seed=1, greedy=True) is not None
    assert loads == [str(tiny_lm)]
    (runtime,) = fresh_runtimes._SHARED.values()
    names = {fresh_runtimes.folder_adapter_name(f) for f in adapter_dirs.values()}
    assert names <= set(runtime.backend.list_adapters())
