"""Runs that start from a trained network (``yz run --init-from``) and the lineage they carry.

Training accumulates across working sessions: a run may start from the shipped ``pretrained``
network or any checkpoint instead of a random one. The run's ``models/best_0000.pt`` is then a
copy of that network (its shape, not the config's ``model`` section, decides the architecture:
the section is rewritten to match and the saved ``config.yaml`` says so), and ``RUN/lineage.json``
records where it came from. Every candidate the run trains carries the whole chain in its
checkpoint (``extra["lineage"]``: one entry per run, oldest first), so a network shipped after
several sessions still says how it was made.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from leaguezero.az.checkpoint import CheckpointError, load_checkpoint
from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.lineage import read_lineage_record
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.networks import MODEL_CONSTRUCTORS, MODEL_KIND, TOWER_KIND
from leaguezero.yatzy.net.schema import kind_of_schema

LINEAGE_VERSION = 1
LINEAGE_FILE = "lineage.json"


class LineageError(ValueError):
    """A network a run cannot start from, or a damaged ``lineage.json``."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_section_of(kind: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``model`` config section that builds a network of checkpoint ``kind``/``kwargs``."""
    if kind == MODEL_KIND:
        return {"arch": "resmlp", "hidden": kwargs["hidden"], "blocks": kwargs["blocks"],
                "margin_head": kwargs["margin_head"]}  # fmt: skip
    if kind == TOWER_KIND:
        return {"arch": "board_towers", "hidden": kwargs["hidden"],
                "margin_head": kwargs["margin_head"]}  # fmt: skip
    raise LineageError(f"model kind {kind!r} is not a Yatzy network")


def start_from(cfg: YatzyConfig, models: Path, source: Path) -> tuple[YatzyConfig, dict]:
    """Copy ``source`` into ``models/best_0000.pt`` and ``models/best.pt``.

    Returns the config with its ``model`` section taken from the network, and the lineage
    record to store in the run. Raises :class:`LineageError` when ``source`` is not a Yatzy
    checkpoint for ``cfg.search.kind`` (checked before anything is written).
    """
    try:
        _, meta = load_checkpoint(source, MODEL_CONSTRUCTORS)
        found = kind_of_schema(meta.schema.feature_schema_id)
    except (CheckpointError, ValueError, OSError) as err:
        raise LineageError(f"--init-from {source}: {str(err).splitlines()[0]}") from None
    if found != cfg.search.kind:
        raise LineageError(
            f"--init-from {source} is a {found}-search network; this run's search.kind is "
            f"{cfg.search.kind} (pass --set search.kind={found})"
        )
    model = {**cfg.model.model_dump(), **model_section_of(meta.kind, meta.kwargs)}
    cfg = cfg.model_copy(update={"model": type(cfg.model).model_validate(model)})
    extra = meta.extra or {}
    record = {
        "schema_version": LINEAGE_VERSION,
        "init_from": {
            "path": str(Path(source).resolve()),
            "sha256": _sha256(source),
            "iteration": extra.get("iteration"),
            "train_step": meta.train_step,
            "git_hash": meta.git_hash,
        },
        "ancestors": list(extra.get("lineage", [])),
    }
    models.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, models / "best_0000.pt")
    shutil.copyfile(models / "best_0000.pt", models / "best.pt")
    return cfg, record


def write_lineage(root: Path, record: dict) -> None:
    """Store ``record`` as ``root/lineage.json`` (atomically)."""
    atomic_write_json(root / LINEAGE_FILE, record)


def read_lineage(root: Path) -> dict | None:
    """The run's lineage record, None for a run that started from a random network."""
    return read_lineage_record(Path(root) / LINEAGE_FILE, LINEAGE_VERSION, LineageError)


def checkpoint_lineage(root: Path, cfg: YatzyConfig) -> list[dict]:
    """The chain a checkpoint of this run carries: its ancestors, then this run."""
    record = read_lineage(root)
    ancestors = record["ancestors"] if record else []
    here = {
        "run": str(Path(root).resolve()),
        "init_from": record["init_from"] if record else None,
        "config": cfg.model_dump(mode="json"),
    }
    return [*ancestors, here]
