"""Model checkpoints: weights + the model's kind and constructor kwargs + schema ids.

A checkpoint is one ``torch.save`` file holding only tensors and plain Python values, so it
loads with ``torch.load(weights_only=True)`` (no pickled code runs). It is written atomically,
and a ``<path>.meta.json`` sidecar repeats the metadata for people and tools that do not want
to load torch (the ``.pt`` file is authoritative). The metadata carries a ``checksum`` (sha256
over the tensors' names, dtypes, shapes and bytes), verified on read, and every floating-point
weight must be finite: a damaged or NaN checkpoint is a :class:`CheckpointError`, not a model.

``az`` knows no game: the file stores a model ``kind`` string and its kwargs, and the caller
passes a ``{kind: constructor}`` mapping (Yatzy passes
``leaguezero.yatzy.net.networks.MODEL_CONSTRUCTORS``).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from leaguezero.common.atomic import atomic_write_bytes, atomic_write_json

CHECKPOINT_FORMAT_VERSION = 1
# The inference contract a checkpoint's model answers (features of its schema in; logits,
# values and margins out). The wire protocol's version 2 changed framing and admin only
# (docs/reference/protocol.md), so checkpoints, theirs and older ones, stay at 1.
MODEL_PROTOCOL_VERSION = 1
_META_KEYS = ("feature_schema_id", "action_space_id", "ruleset_id", "protocol_version")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, unreadable, wrong version or wrong schema."""


@dataclass(frozen=True)
class SchemaIds:
    """The ids that must match between a checkpoint, replay shards and inference requests."""

    feature_schema_id: int
    action_space_id: str
    ruleset_id: str
    protocol_version: int = MODEL_PROTOCOL_VERSION


@dataclass(frozen=True)
class CheckpointMeta:
    """Everything in a checkpoint except the weights."""

    kind: str
    kwargs: dict[str, Any]
    schema: SchemaIds
    train_step: int = 0
    git_hash: str = "unknown"
    created_unix: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    format_version: int = CHECKPOINT_FORMAT_VERSION
    checksum: str = ""  # state_checksum() of the weights; "" in files from before it existed

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("schema"))
        return out


def git_hash() -> str:
    """The current git commit of the working directory, or ``"unknown"`` outside a checkout."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        return result.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def state_checksum(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 (hex) over each tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def torch_load_reason(err: BaseException) -> str:
    """One short line saying why ``torch.load(..., weights_only=True)`` failed.

    torch's own messages run over many lines and hundreds of characters, can be empty (an
    empty file) or bare (``KeyError: 101`` from a damaged archive, ``[Errno 22]`` from a
    truncated one, "please report an enhancement request"), and for a file that is not a plain
    checkpoint advise ``weights_only=False`` -- advice we must never pass on. So the reason is
    one of a few fixed phrases; only a real filesystem error keeps its own words.
    """
    text = str(err).strip()
    if "Weights only load failed" in text or type(err).__name__ == "UnpicklingError":
        return "not a checkpoint file, or one that holds code rather than only weights"
    if isinstance(err, (PermissionError, IsADirectoryError, FileNotFoundError)):
        return err.strerror or type(err).__name__
    return f"truncated or damaged file ({type(err).__name__})"


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    *,
    kind: str,
    kwargs: Mapping[str, Any],
    schema: SchemaIds,
    train_step: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> CheckpointMeta:
    """Write ``model``'s weights and metadata to ``path`` atomically (plus a ``.meta.json``).

    ``kwargs`` must be plain values (int, float, str, bool, lists/dicts of those) so that the
    file stays loadable with ``weights_only=True``.
    """
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    meta = CheckpointMeta(
        kind=kind,
        kwargs=dict(kwargs),
        schema=schema,
        train_step=int(train_step),
        git_hash=git_hash(),
        created_unix=time.time(),
        extra=dict(extra or {}),
        checksum=state_checksum(state),
    )
    buffer = io.BytesIO()
    torch.save({"meta": meta.to_dict(), "state_dict": state}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    atomic_write_json(Path(str(path) + ".meta.json"), meta.to_dict())
    return meta


def read_checkpoint(path: str | Path) -> tuple[CheckpointMeta, dict[str, torch.Tensor]]:
    """Read a checkpoint's metadata and state dict (CPU tensors); checks ``format_version``.

    Raises:
        CheckpointError: missing file, not a checkpoint, or an unsupported format version.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is an empty file (an interrupted copy?)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt or unsafe files
        raise CheckpointError(
            f"checkpoint {path} cannot be read: {torch_load_reason(err)}"
        ) from None
    if (
        not isinstance(blob, dict)
        or not isinstance(blob.get("meta"), dict)
        or not isinstance(blob.get("state_dict"), dict)
    ):
        raise CheckpointError(f"{path} is not a leaguezero checkpoint (no meta/state_dict)")
    raw = blob["meta"]
    version = raw.get("format_version")
    if version != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format_version {version}; this build reads "
            f"{CHECKPOINT_FORMAT_VERSION} (re-save it with a matching leaguezero)"
        )
    try:
        meta = CheckpointMeta(
            kind=str(raw["kind"]),
            kwargs=dict(raw["kwargs"]),
            schema=SchemaIds(**{k: raw[k] for k in _META_KEYS}),
            train_step=int(raw["train_step"]),
            git_hash=str(raw["git_hash"]),
            created_unix=float(raw["created_unix"]),
            extra=dict(raw["extra"]),
            format_version=int(version),
            checksum=str(raw.get("checksum", "")),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} has incomplete metadata: {err!r}") from None
    state = blob["state_dict"]
    if not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"checkpoint {path} has a state_dict entry that is not a tensor")
    if meta.checksum and state_checksum(state) != meta.checksum:
        raise CheckpointError(
            f"checkpoint {path} is damaged: its weights do not match the checksum in its "
            "metadata; use another checkpoint (e.g. the run's best.pt)"
        )
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"checkpoint {path} holds NaN or infinite weights ({name}); it cannot be "
                "served or trained from; use another checkpoint"
            )
    return meta, state


def check_schema(meta: CheckpointMeta, expect: SchemaIds, where: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` naming the first schema id that differs from ``expect``."""
    for key in _META_KEYS:
        got, want = getattr(meta.schema, key), getattr(expect, key)
        if got != want:
            raise CheckpointError(
                f"{where} has {key}={got!r} but {want!r} is required; "
                "use a checkpoint trained with the current features/rules"
            )


def load_checkpoint(
    path: str | Path,
    constructors: Mapping[str, Callable[..., nn.Module]],
    *,
    expect: SchemaIds | None = None,
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, CheckpointMeta]:
    """Rebuild the model stored at ``path`` in eval mode on ``device``.

    Args:
        constructors: ``{kind: callable(**kwargs) -> nn.Module}`` for the kinds the caller knows.
        expect: schema ids the caller needs; any difference is an error.

    Raises:
        CheckpointError: see :func:`read_checkpoint`, an unknown kind, a schema mismatch, or
            weights that do not fit the rebuilt model.
    """
    meta, state = read_checkpoint(path)
    if expect is not None:
        check_schema(meta, expect, where=f"checkpoint {path}")
    if meta.kind not in constructors:
        known = ", ".join(sorted(constructors)) or "none"
        raise CheckpointError(f"checkpoint {path} holds model kind {meta.kind!r}; known: {known}")
    model = constructors[meta.kind](**meta.kwargs)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise CheckpointError(
            f"checkpoint {path} weights do not fit {meta.kind}: {first}"
        ) from None
    return model.to(device).eval(), meta
