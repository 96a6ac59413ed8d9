"""GGUF files written byte by byte for the hostile-header tests (and
``benchmarks/gguf_hostile.py``): a small valid header, and files whose counts lie."""

from __future__ import annotations

import struct

UINT32, STRING, ARRAY, UINT64 = 4, 8, 9, 10
F32 = 0  # ggml type of a float32 tensor


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def kv_string(key: bytes, value: bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", STRING) + gguf_string(value)


def kv_u32(key: bytes, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", UINT32, value)


def kv_string_array(key: bytes, items: list[bytes], count: int | None = None) -> bytes:
    body = b"".join(gguf_string(item) for item in items)
    n = len(items) if count is None else count
    return gguf_string(key) + struct.pack("<IIQ", ARRAY, STRING, n) + body


def header(tensor_count: int, kv_count: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensor_count, kv_count)


def tensor_info(name: bytes, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return (
        gguf_string(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def valid_file() -> bytes:
    """Two KVs, one 4x4 float32 tensor, aligned to 32 bytes: a well-formed header."""
    kvs = kv_string(b"general.architecture", b"llama") + kv_u32(b"llama.block_count", 1)
    infos = tensor_info(b"token_embd.weight", (4, 4), F32, 0)
    head = header(1, 2) + kvs + infos
    head += b"\0" * (-len(head) % 32)
    return head + b"\0" * 64


def hostile_files() -> dict[str, bytes]:
    """Each hostile case of issue 54 item 6 by name (all small files)."""
    arch = kv_string(b"general.architecture", b"llama")
    big_key = struct.pack("<Q", 1 << 60) + b"general.architecture"
    many_strings = gguf_string(b"tokenizer.ggml.tokens") + struct.pack(
        "<IIQ", ARRAY, STRING, 1 << 40
    )
    empty_vocab = (  # 3,000,000 strings of length 0: 24 MB
        gguf_string(b"tokenizer.ggml.tokens")
        + struct.pack("<IIQ", ARRAY, STRING, 3_000_000)
        + struct.pack("<Q", 0) * 3_000_000
    )
    return {
        "kv_count_2e63": header(0, 1 << 63) + arch,
        "key_length_2e60": header(0, 1) + big_key + b"\0" * 64,
        "array_2e40": header(0, 2) + arch + many_strings + struct.pack("<Q", 0) * 16,
        "truncated": valid_file()[:70],
        "empty_vocab_3e6": header(0, 2) + arch + empty_vocab,
        "bad_magic": b"GGUX" + valid_file()[4:],
        "tensor_past_end": header(1, 1)
        + arch
        + tensor_info(b"token_embd.weight", (1 << 20, 1 << 20), F32, 0)
        + b"\0" * 64,
    }


class _Saves:
    """Stands in for a converted model or tokenizer: ``save_pretrained`` writes ``files``."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def save_pretrained(self, folder) -> None:
        for name, data in self.files.items():
            (folder / name).write_bytes(data)


def fake_dequantised(source):
    """``gguf._dequantised`` without transformers: a "model" and "tokenizer" whose files
    carry the source's bytes (so two sources give two conversions)."""
    data = source.read_bytes()
    model = _Saves({"config.json": b"{}", "model.safetensors": data * 4})
    return model, _Saves({"tokenizer.json": b"{}"})
