"""A GGUF file's header read and checked before anything else touches the file.

The ``gguf`` package (what transformers reads GGUF with) trusts every count in the header: a
KV count of 2^63, a key length of 2^60 or an array of 2^40 strings ends in a ``struct.error``
traceback, and a 24 MB file of 3,000,000 empty vocabulary strings costs it ~1.25 KB and ~20 us
of CPU per string (gigabytes) before anything fails. :func:`check_header` walks the header
once over a read-only map of the file: every count is checked against the bytes left (each
item takes at least its minimum size) *before* it is read, and against fixed bounds, with no
per-item allocation; the tensors' data must lie inside the file (a truncated file is found
here, not by hashing and converting it). Every failure is one
:class:`~leaguezero.diplomacy.llm.client.LLMError` line naming the file and what is wrong.

The bounds hold real models with room to spare: the largest tokenizers we know hold 262,144
tokens (Gemma 3: 786,432 array items with their scores and types; Llama 3: 536,659 with its
280,147 merges).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from leaguezero.diplomacy.llm.client import LLMError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_KV = 65_536  # metadata keys (real files: ~40)
MAX_TENSORS = 65_536  # tensor infos (real files: a few hundred to ~2,000)
MAX_KEY_BYTES = 65_535  # the spec's limit on a key's length
MAX_STRING_BYTES = 16 << 20  # one string value (a chat template: ~10 KB)
MAX_ARRAY_ITEMS = 1 << 19  # one array (a vocabulary: 32,000 to 262,144 tokens)
MAX_METADATA_ITEMS = 1 << 20  # array items in all keys together (the gguf package: ~1.3 GB)
MAX_ARRAY_DEPTH = 4  # arrays of arrays
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32

# GGUF value types: the fixed-size ones by their struct code.
_SCALAR = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFHeader:
    """What :func:`check_header` read: the file's format version, its counts, where the
    tensor data starts (bytes from the file's start) and where it ends (at most the size)."""

    version: int
    kv_count: int
    tensor_count: int
    data_start: int
    data_end: int
    architecture: str | None


class _Reader:
    """Bounds-checked little reads over a map of the file; every failure one line."""

    def __init__(self, buf, path: Path, endian: str) -> None:
        self.buf, self.path, self.endian = buf, path, endian
        self.pos = 0
        self.size = len(buf)

    def damaged(self, what: str) -> LLMError:
        return LLMError(f"GGUF file {self.path} is damaged or not a GGUF file: {what}")

    def need(self, nbytes: int, what: str) -> None:
        if nbytes > self.size - self.pos:
            raise self.damaged(
                f"{what} needs {nbytes:,} bytes at byte {self.pos:,} but the file ends at "
                f"{self.size:,} (truncated?)"
            )

    def scalar(self, code: str, what: str):
        size = struct.calcsize(code)
        self.need(size, what)
        (value,) = struct.unpack_from(self.endian + code, self.buf, self.pos)
        self.pos += size
        return value

    def count(self, what: str, limit: int, item_min_bytes: int) -> int:
        """A uint64 count of items that take ``item_min_bytes`` each at least: refused when
        above ``limit`` or when that many items cannot fit in the bytes left."""
        n = self.scalar("Q", what)
        if n > limit:
            raise self.damaged(f"{what} is {n:,}, above the limit of {limit:,}")
        if n * item_min_bytes > self.size - self.pos:
            raise self.damaged(
                f"{what} is {n:,} but only {self.size - self.pos:,} bytes are left "
                f"(at least {item_min_bytes} each; truncated?)"
            )
        return n

    def string(self, what: str, limit: int) -> bytes:
        n = self.count(f"the length of {what}", limit, 1)
        value = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return value

    def skip_string(self, what: str, limit: int) -> None:
        n = self.count(f"the length of {what}", limit, 1)  # moves pos past the length first
        self.pos += n


def check_header(path: str | os.PathLike) -> GGUFHeader:
    """Read and check the header of the GGUF file ``path`` (see the module doc).

    Raises :class:`~leaguezero.diplomacy.llm.client.LLMError` (one line naming the file) for a file
    that cannot be read, a bad magic or version, a count past a bound or past the file's end, a bad
    value type or a tensor whose data lies outside the file.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic = f.read(4)
            if magic != MAGIC:
                raise LLMError(
                    f"GGUF file {path} does not start with the GGUF magic (got {magic!r})"
                )
            if size < 24:
                raise LLMError(
                    f"GGUF file {path} is damaged or not a GGUF file: {size} bytes, shorter "
                    "than a GGUF header (24)"
                )
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _check(buf, path)
    except OSError as err:
        raise LLMError(f"cannot read GGUF file {path}: {err.strerror or err}") from None


def _check(buf, path: Path) -> GGUFHeader:
    endian = "<"
    version = struct.unpack_from("<I", buf, 4)[0]
    if version not in SUPPORTED_VERSIONS and struct.unpack_from(">I", buf, 4)[0] in (2, 3):
        endian, version = ">", struct.unpack_from(">I", buf, 4)[0]  # a big-endian file
    if version not in SUPPORTED_VERSIONS:
        raise LLMError(
            f"GGUF file {path} has format version {version}; only versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))} are read"
        )
    reader = _Reader(buf, path, endian)
    reader.pos = 8
    # Each tensor info takes at least 8 (name length) + 4 (dims) + 4 (type) + 8 (offset) bytes,
    # each KV at least 8 (key length) + 4 (type) + 1 (a uint8 value).
    tensor_count = reader.scalar("Q", "the tensor count")
    kv_count = reader.count("the metadata key count", MAX_KV, 13)
    if tensor_count > MAX_TENSORS:
        raise reader.damaged(
            f"the tensor count is {tensor_count:,}, above the limit of {MAX_TENSORS:,}"
        )
    budget = [MAX_METADATA_ITEMS]
    alignment, architecture = DEFAULT_ALIGNMENT, None
    for index in range(kv_count):
        key = reader.string(f"key {index}", MAX_KEY_BYTES).decode("utf-8", "replace")
        value_type = reader.scalar("I", f"the value type of {key!r}")
        if key == "general.alignment" and value_type == 4:
            alignment = reader.scalar("I", key)
            if alignment == 0 or alignment & (alignment - 1):
                raise reader.damaged(f"general.alignment is {alignment}, not a power of two")
        elif key == "general.architecture" and value_type == _STRING:
            architecture = reader.string(key, MAX_STRING_BYTES).decode("utf-8", "replace")
        else:
            _skip_value(reader, value_type, key, budget, depth=0)
    if tensor_count * 24 > reader.size - reader.pos:
        raise reader.damaged(
            f"the tensor count is {tensor_count:,} but only {reader.size - reader.pos:,} bytes "
            "are left (at least 24 each; truncated?)"
        )
    tensors = [_tensor_info(reader, index) for index in range(tensor_count)]
    data_start = -(-reader.pos // alignment) * alignment
    data_end = _check_tensor_data(reader, tensors, data_start, alignment)
    return GGUFHeader(version, kv_count, tensor_count, data_start, data_end, architecture)


def _skip_value(reader: _Reader, value_type: int, key: str, budget: list[int], depth: int) -> None:
    if value_type in _SCALAR:
        reader.need(struct.calcsize(_SCALAR[value_type]), f"the value of {key!r}")
        reader.pos += struct.calcsize(_SCALAR[value_type])
    elif value_type == _STRING:
        reader.skip_string(f"the value of {key!r}", MAX_STRING_BYTES)
    elif value_type == _ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise reader.damaged(f"{key!r} nests arrays more than {MAX_ARRAY_DEPTH} deep")
        item_type = reader.scalar("I", f"the item type of {key!r}")
        if item_type in _SCALAR:
            item_min = struct.calcsize(_SCALAR[item_type])
        elif item_type in (_STRING, _ARRAY):
            item_min = 8 if item_type == _STRING else 12  # a length; an item type and a count
        else:
            raise reader.damaged(f"{key!r} is an array of unknown value type {item_type}")
        n = reader.count(f"the length of the array {key!r}", MAX_ARRAY_ITEMS, item_min)
        if n > budget[0]:
            raise reader.damaged(
                f"the arrays up to {key!r} hold more than {MAX_METADATA_ITEMS:,} items in all"
            )
        budget[0] -= n
        if item_type in _SCALAR:
            reader.pos += n * item_min  # fixed-size items: one jump, checked by count()
        elif item_type == _STRING:
            for _ in range(n):
                reader.skip_string(f"a string in {key!r}", MAX_STRING_BYTES)
        else:
            for _ in range(n):
                _skip_value(reader, _ARRAY, key, budget, depth + 1)
    else:
        raise reader.damaged(f"{key!r} has unknown value type {value_type}")


def _tensor_info(reader: _Reader, index: int) -> tuple[str, tuple[int, ...], int, int]:
    name = reader.string(f"tensor {index}'s name", MAX_KEY_BYTES).decode("utf-8", "replace")
    n_dims = reader.scalar("I", f"tensor {name!r}'s number of dimensions")
    if not 1 <= n_dims <= MAX_DIMS:
        raise reader.damaged(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    dims = tuple(reader.scalar("Q", f"tensor {name!r}'s shape") for _ in range(n_dims))
    ggml_type = reader.scalar("I", f"tensor {name!r}'s type")
    offset = reader.scalar("Q", f"tensor {name!r}'s offset")
    return name, dims, ggml_type, offset


def _check_tensor_data(reader: _Reader, tensors, data_start: int, alignment: int) -> int:
    """Each tensor's bytes inside the file; the end of the last (the file's size when the
    ``gguf`` package, which knows the quantisation block sizes, is not installed)."""
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:  # converting needs the package anyway, and says so
        return reader.size
    end = data_start
    for name, dims, ggml_type, offset in tensors:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise reader.damaged(f"tensor {name!r} has unknown ggml type {ggml_type}") from None
        if dims[0] % block:
            raise reader.damaged(
                f"tensor {name!r}'s first dimension {dims[0]} is not a whole number of "
                f"{block}-item blocks"
            )
        if offset % alignment:
            raise reader.damaged(
                f"tensor {name!r}'s offset {offset:,} is not a multiple of {alignment}"
            )
        items = 1
        for dim in dims:
            items *= dim
        tensor_end = data_start + offset + items // block * type_size
        if tensor_end > reader.size:
            raise reader.damaged(
                f"tensor {name!r} ends at byte {tensor_end:,}, past the file's end at "
                f"{reader.size:,} (truncated?)"
            )
        end = max(end, tensor_end)
    return end
