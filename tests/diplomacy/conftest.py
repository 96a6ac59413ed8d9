"""Fixtures the LLM tests share: one tiny causal LM per test process (built on the spot, no
downloads; every test only reads its folder) and two saved adapters on it that differ."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    from tests.diplomacy.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def adapter_dirs(tiny_lm, tmp_path_factory):
    """Two saved adapters that differ (each perturbed with its own seed)."""
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
    from tests.diplomacy.llm.model.test_llm_hf import perturb

    backend = HFBackend.from_pretrained(tiny_lm)
    root = tmp_path_factory.mktemp("adapters")
    folders = {}
    for seed, name in enumerate(("austria-v0001", "england-v0001"), start=1):
        backend.add_adapter(name)
        perturb(backend, name, seed)
        folders[name] = str(backend.save_adapter(name, root / name))
    return folders
