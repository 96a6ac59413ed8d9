"""Read an adapter folder safely, before anything is allocated in the model (``llm serve``).

A load request names a folder on the server's filesystem, and anyone who can reach the server
may send one. :func:`read_adapter_folder` therefore

- opens each file relative to the folder without following symlinks and without blocking
  (``O_NOFOLLOW | O_NONBLOCK``), and reads only regular files owned by the server's user (or
  root) in a folder owned by it (or root): a FIFO named like a weights file cannot hang the
  server, and a symlinked or foreign ``leaguezero_adapter.json`` cannot make it read (and
  echo) another user's file;
- reads each file with a size bound;
- loads weights only from ``adapter_model.safetensors``: a pickled ``adapter_model.bin`` is
  refused, never unpickled;
- checks every rank the LoRA config can express (``r`` and ``rank_pattern``) against
  ``max_lora_rank``, and the rank dimension of every tensor, before the model allocates a byte;
- builds the peft config from a fixed list of fields (others are ignored; weights that then
  do not fit the model are refused when they are installed, see ``HFBackend.load_adapter``);
- checks the sha256 of ``adapter_config.json`` and ``adapter_model.safetensors`` against the
  ``sha256`` map of ``leaguezero_adapter.json`` (:func:`folder_checksums`, written by
  ``HFBackend.save_adapter``): a damaged adapter is refused, not served. A folder saved before
  checksums (or by peft alone) has none and is read unchecked.

Raises :class:`AdapterFileError` (an :class:`~leaguezero.diplomacy.llm.client.LLMError`, one short
line) for all of it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaguezero.diplomacy.llm.client import LLMError

CONFIG_FILE = "adapter_config.json"
META_FILE = "leaguezero_adapter.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PICKLED_WEIGHTS_FILE = "adapter_model.bin"
MAX_JSON_BYTES = 1 << 20
MAX_ADAPTER_NAME = 128
# Printable ASCII without "." (peft splits module paths on it) or space.
_ADAPTER_NAME = re.compile(rf"[!-\-/-~]{{1,{MAX_ADAPTER_NAME}}}")
MAX_ALPHA = 1e6  # lora_alpha and alpha_pattern values
MAX_MODULE_NAME = 200  # a key of rank_pattern / alpha_pattern, a target module
MAX_PATTERN_ENTRIES = 1000
DEFAULT_MAX_WEIGHTS_BYTES = 2 << 30

# The peft LoraConfig fields an adapter folder may set; the rest are dropped (the exotic ones
# allocate or rewrite base weights: layer_replication, modules_to_save, init_lora_weights="pissa").
_LORA_FIELDS = (
    "r",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
    "exclude_modules",
    "rank_pattern",
    "alpha_pattern",
    "fan_in_fan_out",
    "use_rslora",
    "layers_to_transform",
    "layers_pattern",
    "task_type",
)


def _trusted_uids() -> tuple[int, int]:
    # Root's files are no attacker's (and root could read ours anyway): models under /opt.
    return (os.geteuid(), 0)


class AdapterFileError(LLMError):
    """An adapter folder that cannot (or must not) be loaded; the message is one line."""


CHECKSUMMED_FILES = (CONFIG_FILE, WEIGHTS_FILE)
# Adapter folders the trainer writes are read by a server that may run as another user of the
# same group (docs/guides/llm.md, two containers): group-readable, not world-readable, and never
# more open than the process's umask allows (a umask of 077 keeps them private).
ADAPTER_FILE_MODE = 0o640
ADAPTER_FOLDER_MODE = 0o750


def _umask() -> int:
    try:  # Linux >= 4.7 shows it; setting it to read it would race other threads' file creation
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def adapter_folder_mode() -> int:
    """The mode of an adapter folder the trainer writes: 0750 less the umask."""
    return ADAPTER_FOLDER_MODE & ~_umask()


def adapter_file_mode() -> int:
    """The mode of a file in an adapter folder the trainer writes: 0640 less the umask."""
    return ADAPTER_FILE_MODE & ~_umask()


def share_with_group(folder: str | os.PathLike) -> None:
    """Give every file in ``folder`` :func:`adapter_file_mode` (the trainer's adapter folders)."""
    mode = adapter_file_mode()
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            os.chmod(entry.path, mode)


def folder_checksums(folder: str | os.PathLike) -> dict[str, str]:
    """``{file name: sha256 hex}`` of an adapter folder's config and weights (the ``sha256``
    entry of its ``leaguezero_adapter.json``)."""
    out = {}
    for name in CHECKSUMMED_FILES:
        digest = hashlib.sha256()
        with open(Path(folder) / name, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        out[name] = digest.hexdigest()
    return out


def _check_checksums(meta: dict[str, Any] | None, read: dict[str, bytes], folder: Path) -> None:
    expected = None if meta is None else meta.get("sha256")
    if expected is None:
        return  # saved before checksums, or not by leaguezero
    if not isinstance(expected, dict):
        raise AdapterFileError(f"{folder / META_FILE}: 'sha256' must map file names to digests")
    for name, data in read.items():
        want = expected.get(name)
        if want is not None and want != hashlib.sha256(data).hexdigest():
            raise AdapterFileError(
                f"adapter {folder} is damaged: {name} does not match the checksum in {META_FILE}; "
                "use another version of it (or copy it again)"
            )


@dataclass
class AdapterFiles:
    """What :func:`read_adapter_folder` read: a peft ``LoraConfig`` and the weights."""

    config: Any
    weights: dict[str, Any]
    meta: dict[str, Any] | None


def _open_dir(folder: Path) -> int:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AdapterFileError(
            f"adapter folder {folder} has no {CONFIG_FILE} (no such folder)"
        ) from None
    except OSError as err:
        raise AdapterFileError(f"cannot open adapter folder {folder}: {err.strerror}") from None
    st = os.fstat(fd)
    if st.st_uid not in _trusted_uids():
        os.close(fd)
        raise AdapterFileError(
            f"adapter folder {folder} belongs to uid {st.st_uid}, "
            "neither this server's user nor root"
        )
    return fd


def read_private_file(dir_fd: int, name: str, limit: int, folder: Path) -> bytes | None:
    """The bytes of regular file ``name`` in the folder ``dir_fd``; None if it is absent.

    Raises :class:`AdapterFileError` for a symlink, a non-regular file (FIFO, device), a file
    owned by another user or one larger than ``limit`` bytes.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symlink
        why = "is a symlink" if os.path.islink(folder / name) else err.strerror
        raise AdapterFileError(f"refusing {folder / name}: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AdapterFileError(f"refusing {folder / name}: not a regular file")
        if st.st_uid not in _trusted_uids():
            raise AdapterFileError(
                f"refusing {folder / name}: owned by uid {st.st_uid}, "
                "neither this server's user nor root"
            )
        if st.st_size > limit:
            raise AdapterFileError(f"{folder / name} is larger than {limit} bytes")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew since the fstat
                raise AdapterFileError(f"{folder / name} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _json_object(data: bytes, path: Path) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        raise AdapterFileError(f"{path} is not valid JSON") from None
    if not isinstance(value, dict):
        raise AdapterFileError(f"{path} must hold a JSON object")
    return value


def _rank(value: Any, where: str, max_rank: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdapterFileError(f"{where} must be an integer rank, got {type(value).__name__}")
    if not 1 <= value <= max_rank:
        raise AdapterFileError(f"{where} = {value} is outside 1..max_lora_rank ({max_rank})")
    return value


def _number(value: Any, where: str, low: float = -MAX_ALPHA, high: float = MAX_ALPHA) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    # An int beyond a float's range is refused too (math.isfinite would raise on it).
    if not ok or not (low <= value <= high) or not math.isfinite(float(value)):
        raise AdapterFileError(f"{where} must be a finite number in [{low:g}, {high:g}]")


def _names(value: Any, where: str) -> None:
    """A module name or a list of them (``target_modules``, ``exclude_modules``)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or len(names) > MAX_PATTERN_ENTRIES:
        raise AdapterFileError(f"{where} must be a string or a list of at most "
                               f"{MAX_PATTERN_ENTRIES} strings")  # fmt: skip
    for name in names:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_MODULE_NAME:
            raise AdapterFileError(f"{where} holds a name that is not a string of 1.."
                                   f"{MAX_MODULE_NAME} characters")  # fmt: skip


def check_adapter_name(name: Any) -> str:
    """``name`` if it can name a served adapter: 1..128 printable ASCII characters, no space
    and no ``.``; else :class:`AdapterFileError` (the name shown cut short)."""
    if not isinstance(name, str) or not _ADAPTER_NAME.fullmatch(name):
        shown = repr(name)[:40] + ("..." if len(repr(name)) > 40 else "")
        raise AdapterFileError(
            f"{shown} cannot name an adapter: use 1..{MAX_ADAPTER_NAME} letters, digits and "
            "punctuation other than '.' (no spaces)"
        )
    return name


def check_lora_config(raw: dict[str, Any], max_rank: int) -> dict[str, Any]:
    """The allowed fields of ``raw`` (an ``adapter_config.json``), every rank checked."""
    if raw.get("peft_type", "LORA") != "LORA":
        raise AdapterFileError(f"peft_type {str(raw.get('peft_type'))[:40]!r} is not LORA")
    if "r" not in raw:
        raise AdapterFileError("adapter_config.json has no 'r' (the LoRA rank)")
    _rank(raw["r"], "r", max_rank)
    for key in ("rank_pattern", "alpha_pattern"):
        pattern = raw.get(key) or {}
        if not isinstance(pattern, dict) or len(pattern) > MAX_PATTERN_ENTRIES:
            raise AdapterFileError(f"{key} must be an object of at most {MAX_PATTERN_ENTRIES} "
                                   "entries")  # fmt: skip
        for module, value in pattern.items():
            if len(module) > MAX_MODULE_NAME:
                raise AdapterFileError(f"{key} has a module name longer than {MAX_MODULE_NAME}")
            if key == "rank_pattern":
                _rank(value, f"rank_pattern[{module[:60]!r}]", max_rank)
            else:
                _number(value, f"alpha_pattern[{module[:60]!r}]")
    _number(raw.get("lora_alpha", 8), "lora_alpha")
    _number(raw.get("lora_dropout", 0.0), "lora_dropout", 0.0, 1.0)
    for key in ("target_modules", "exclude_modules", "layers_pattern"):
        if raw.get(key) is not None:
            _names(raw[key], key)
    layers = raw.get("layers_to_transform")
    if layers is not None:
        listed = [layers] if isinstance(layers, int) else layers
        if not isinstance(listed, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 100_000 for i in listed
        ):
            raise AdapterFileError("layers_to_transform must be a layer index or a list of them")
    for key in ("fan_in_fan_out", "use_rslora"):
        if not isinstance(raw.get(key, False), bool):
            raise AdapterFileError(f"{key} must be true or false")
    return {k: raw[k] for k in _LORA_FIELDS if raw.get(k) is not None}


def _check_weights(weights: dict[str, Any], max_rank: int, path: Path) -> None:
    # peft stores lora_A as (r, in) and lora_B as (out, r); the config's ranks were checked,
    # and a tensor whose rank dimension disagrees is refused before it reaches the model.
    for key, tensor in weights.items():
        if "lora_A" in key:
            rank = tensor.shape[0] if tensor.dim() >= 1 else 0
        elif "lora_B" in key:
            rank = tensor.shape[1] if tensor.dim() >= 2 else 0
        else:
            raise AdapterFileError(f"{path} holds {key[:80]!r}, which is not a LoRA weight")
        if not 1 <= rank <= max_rank:
            raise AdapterFileError(f"{path}: {key[:80]!r} has rank {rank} (max {max_rank})")


def read_adapter_folder(
    path: str | os.PathLike,
    *,
    max_rank: int,
    schema_version: int,
    max_weights_bytes: int = DEFAULT_MAX_WEIGHTS_BYTES,
    prompt_version: str | None = None,
) -> AdapterFiles:
    """Read and check the adapter in folder ``path`` (see module doc); touches no model.

    ``prompt_version``: the prompt layout this leaguezero renders; an adapter of ours trained on
    another one is refused in one line (it would meet prompts it never saw, silently)."""
    from peft import LoraConfig
    from safetensors import SafetensorError
    from safetensors.torch import load as load_safetensors

    folder = Path(path)
    dir_fd = _open_dir(folder)
    try:
        raw_config = read_private_file(dir_fd, CONFIG_FILE, MAX_JSON_BYTES, folder)
        if raw_config is None:
            raise AdapterFileError(f"adapter folder {folder} has no {CONFIG_FILE}")
        meta_bytes = read_private_file(dir_fd, META_FILE, MAX_JSON_BYTES, folder)
        meta = None if meta_bytes is None else _json_object(meta_bytes, folder / META_FILE)
        if meta is not None and meta.get("schema_version") != schema_version:
            raise AdapterFileError(
                f"adapter {folder} has schema_version {str(meta.get('schema_version'))[:20]}; "
                f"this leaguezero reads {schema_version}"
            )
        trained_on = None if meta is None else meta.get("prompt_version")
        if prompt_version is not None and trained_on is not None and trained_on != prompt_version:
            raise AdapterFileError(
                f"adapter {folder} was trained on prompt {str(trained_on)[:40]!r}; this "
                f"leaguezero renders {prompt_version!r}: retrain it (llm imitate / diplomacy "
                "train) or use the leaguezero version that made it"
            )
        _check_checksums(meta, {CONFIG_FILE: raw_config}, folder)  # before parsing it
        fields = check_lora_config(_json_object(raw_config, folder / CONFIG_FILE), max_rank)
        data = read_private_file(dir_fd, WEIGHTS_FILE, max_weights_bytes, folder)
        if data is None:
            if os.path.lexists(folder / PICKLED_WEIGHTS_FILE):
                raise AdapterFileError(
                    f"adapter {folder} has only {PICKLED_WEIGHTS_FILE} (a pickle, which this "
                    f"server never loads); save it as {WEIGHTS_FILE}"
                )
            raise AdapterFileError(f"adapter folder {folder} has no {WEIGHTS_FILE}")
    finally:
        os.close(dir_fd)
    _check_checksums(meta, {WEIGHTS_FILE: data}, folder)
    try:
        weights = load_safetensors(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        detail = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise AdapterFileError(f"{folder / WEIGHTS_FILE} is damaged ({detail})") from None
    if not weights:
        raise AdapterFileError(f"{folder / WEIGHTS_FILE} holds no tensors")
    _check_weights(weights, max_rank, folder / WEIGHTS_FILE)
    try:
        config = LoraConfig(**fields, bias="none", inference_mode=True)
    except (TypeError, ValueError) as err:
        raise AdapterFileError(f"adapter_config.json: {str(err)[:160]}") from None
    return AdapterFiles(config=config, weights=weights, meta=meta)
