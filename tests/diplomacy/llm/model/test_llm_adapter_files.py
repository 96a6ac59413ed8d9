"""Modes of the adapter folders the trainer writes (issue 38 item 7): a server run by another
user of the same group (docs/guides/llm.md, two containers) can read them; the umask still rules."""

from __future__ import annotations

import os
import stat

import pytest

pytest.importorskip("peft")

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from tests.diplomacy.tiny_lm import build_tiny_lm


def modes(folder):
    return stat.S_IMODE(folder.stat().st_mode), {
        p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()
    }


@pytest.mark.parametrize(
    ("umask", "folder_mode", "file_mode"),
    [(0o022, 0o750, 0o640), (0o002, 0o750, 0o640), (0o027, 0o750, 0o640), (0o077, 0o700, 0o600)],
)
def test_saved_adapters_are_group_readable_as_the_umask_allows(
    tmp_path, umask, folder_mode, file_mode
) -> None:
    backend = HFBackend.from_pretrained(build_tiny_lm(tmp_path / "tiny"))
    backend.add_adapter("hero")
    old = os.umask(umask)
    try:
        folder = backend.save_adapter("hero", tmp_path / "hero-v0001")
    finally:
        os.umask(old)
    got_folder, got_files = modes(folder)
    assert got_folder == folder_mode
    assert set(got_files) >= {"adapter_model.safetensors", "adapter_config.json"}
    assert set(got_files.values()) == {file_mode}, got_files  # safetensors wrote 0600 before
