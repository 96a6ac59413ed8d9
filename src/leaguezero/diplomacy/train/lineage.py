"""Runs that start from a saved agent (``diplomacy train --init-from``) and their lineage.

Training accumulates across working sessions: a new run may start from an agent saved earlier
instead of fresh weights. ``--init-from`` names

- a policy-network checkpoint file (``train.agent: policy``); the network's shape, not the
  config's ``model`` section, decides the architecture (the section is rewritten to match and
  the run's ``config.yaml`` says so);
- an adapter folder (``train.agent: llm``); its rank, alpha and target modules must be the
  config's (``llm.lora_rank``, ``llm.lora_alpha``, ``llm.target_modules``), else one line says
  which differs;
- a run folder (or its ``checkpoints/`` folder): its newest checkpoint (the highest
  ``ckpt_NNNNNN``; a hero trained past it but not checkpointed is not taken);
- ``pretrained``: the policy network shipped with the package,
  :func:`~leaguezero.diplomacy.game.catalogue.pretrained_policy_path` (the catalogue's
  ``PRETRAINED_DIR/policy.pt``, also ``diplomacy eval --hero pretrained``; an installation
  without that file fails the word in one line);
- ``pretrained-llm`` (``train.agent: llm``): the shipped adapter ``PRETRAINED_DIR/llm/adapter``,
  played on ``llm.base_model``, which must be the shipped base ``PRETRAINED_DIR/llm/base``
  (``llm.base_model: pretrained-llm`` names it).

The init agent is the hero's first weights, its KL reference (``train.kl_coef``) and, for the
policy network, the ``base_model`` baseline. ``RUN/lineage.json`` records where it came from
(path, sha256, its step, and the chain it carried); every checkpoint of the run carries the
whole chain (``extra["lineage"]`` of a policy checkpoint, ``lineage.json`` in an adapter
folder: one entry per run, oldest first), so an agent trained over several sessions still says
how it was made. Raises :class:`LineageError` (one line) for a source that cannot be used.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from leaguezero.az.checkpoint import torch_load_reason
from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.lineage import read_lineage_record
from leaguezero.diplomacy.game import catalogue

if TYPE_CHECKING:
    from leaguezero.diplomacy.config import HeroKind

LINEAGE_VERSION = 1
LINEAGE_FILE = "lineage.json"  # in a run folder (the record) and in an adapter checkpoint
_CKPT = re.compile(r"^ckpt_(\d+)(\.pt)?$")


class LineageError(ValueError):
    """An agent a run cannot start from, or a damaged ``lineage.json``."""


@dataclass(frozen=True)
class InitSource:
    """What ``--init-from`` resolved to: a policy checkpoint file or an adapter folder."""

    path: Path  # the file (policy) or folder (llm adapter)
    agent: str  # "policy" | "llm"
    record: dict[str, Any]  # the run's lineage record (RUN/lineage.json)


def pretrained_path() -> Path:
    """The shipped Diplomacy policy checkpoint (raises :class:`LineageError` when absent)."""
    path = catalogue.pretrained_policy_path()
    if path is None:
        where = catalogue.PRETRAINED_DIR / catalogue.PRETRAINED_FILE
        raise LineageError(
            "--init-from pretrained: no pretrained Diplomacy agent ships in this version "
            f"(no {where}); pass a checkpoint or a run folder"
        )
    return path


def pretrained_adapter_path() -> Path:
    """The shipped LLM agent's adapter folder (raises :class:`LineageError` when absent); the
    run's ``llm.base_model`` must be the shipped base beside it (``pretrained/llm/base``)."""
    folders = catalogue.pretrained_llm_folders()
    if folders is None:
        raise LineageError(
            f"--init-from {catalogue.not_shipped(catalogue.PRETRAINED_LLM)}; pass an adapter "
            "or a run folder"
        )
    return folders[1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _step_of(path: Path) -> int | None:
    match = _CKPT.match(path.name)
    return int(match.group(1)) if match else None


def _newest_checkpoint(folder: Path, hero: HeroKind) -> Path | None:
    """The highest ``ckpt_NNNNNN`` of ``folder`` (or of ``folder/checkpoints``) for ``hero``:
    adapter folders of an LLM hero, checkpoint files of a policy."""
    for where in (folder / "checkpoints", folder):
        found = [
            p
            for p in where.glob("ckpt_*")
            if _step_of(p) is not None and (p.is_dir() if hero.llm else p.is_file())
        ]
        if found:
            return max(found, key=lambda p: _step_of(p) or 0)
    return None


def _locate(text: str, hero: HeroKind) -> Path:
    """The checkpoint file or adapter folder ``--init-from text`` names."""
    if text == catalogue.PRETRAINED:
        if hero.llm:
            raise LineageError(
                "--init-from pretrained is the shipped policy network; train.agent=llm starts "
                f"from {catalogue.PRETRAINED_LLM}, {catalogue.PRETRAINED_SMOL}, an adapter folder "
                "or a run folder"
            )
        return pretrained_path()
    if text in (catalogue.PRETRAINED_LLM, catalogue.PRETRAINED_SMOL):
        if not hero.llm:
            raise LineageError(
                f"--init-from {text} is a shipped LLM adapter; train.agent=policy starts "
                "from pretrained, a checkpoint or a run folder"
            )
        if text == catalogue.PRETRAINED_LLM:
            return pretrained_adapter_path()
        folder = catalogue.pretrained_smol_folder()
        if folder is None:
            raise LineageError(f"--init-from {catalogue.not_shipped(text)}")
        return folder  # on SmolLM2: configs/diplomacy_llm_smol.yaml
    path = Path(text).expanduser()
    if not path.exists():
        raise LineageError(f"--init-from {text}: no such file or folder")
    if not hero.llm:
        if path.is_file():
            return path
        newest = _newest_checkpoint(path, hero)
        if newest is None:
            raise LineageError(
                f"--init-from {text}: a folder with no policy checkpoint (ckpt_*.pt)"
            )
        return newest
    if path.is_file():
        raise LineageError(
            f"--init-from {text} is a file; train.agent=llm starts from an adapter folder"
        )
    if (path / "adapter_config.json").exists():
        return path
    newest = _newest_checkpoint(path, hero)
    if newest is None:
        raise LineageError(
            f"--init-from {text}: neither an adapter folder (adapter_config.json) nor a run "
            "with adapter checkpoints"
        )
    return newest


def read_checkpoint_extra(path: Path) -> dict[str, Any]:
    """The lineage metadata a checkpoint carries (``{"step", "lineage"}``; empty if none)."""
    if path.is_dir():
        file = path / LINEAGE_FILE
        try:
            data = json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
        except (OSError, ValueError, RecursionError) as err:
            reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            raise LineageError(
                f"--init-from {path}: {LINEAGE_FILE} cannot be read ({reason}); use another "
                "adapter folder"
            ) from None
    else:
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises many kinds for a damaged file
            raise LineageError(
                f"--init-from {path} cannot be read ({torch_load_reason(err)}); use another "
                "checkpoint"
            ) from None
        data = (blob.get("extra") if isinstance(blob, dict) else None) or {}
    if not isinstance(data, dict):
        return {}
    chain = data.get("lineage")
    if chain is not None and not (
        isinstance(chain, list) and all(isinstance(entry, dict) for entry in chain)
    ):
        raise LineageError(
            f"--init-from {path}: its lineage is damaged (not a list of runs); use another "
            "checkpoint"
        )
    return data


def resolve_init_from(text: str, hero: HeroKind) -> InitSource:
    """Find the agent ``--init-from text`` names for a run training ``hero`` (``train.hero``)
    and build the lineage record of the new run (the weights are checked when the hero loads
    them)."""
    path = _locate(text, hero).resolve()
    extra = read_checkpoint_extra(path)
    weights = path / "adapter_model.safetensors" if path.is_dir() else path
    step = extra.get("step", _step_of(path))
    record = {
        "schema_version": LINEAGE_VERSION,
        "init_from": {
            "given": text,
            "path": str(path),
            "agent": hero.name,
            "sha256": _sha256(weights) if weights.is_file() else None,
            "step": step,
        },
        "ancestors": list(extra.get("lineage") or []),
    }
    return InitSource(path, hero.name, record)


def write_lineage(run_dir: Path, record: dict[str, Any]) -> None:
    """Store ``record`` as ``run_dir/lineage.json`` (atomically)."""
    atomic_write_json(Path(run_dir) / LINEAGE_FILE, record)


def read_lineage(run_dir: Path) -> dict[str, Any] | None:
    """The run's lineage record; None for a run that started from fresh weights."""
    return read_lineage_record(Path(run_dir) / LINEAGE_FILE, LINEAGE_VERSION, LineageError)


def checkpoint_lineage(
    run_dir: Path, record: dict[str, Any] | None, step: int, config: dict[str, Any]
) -> dict[str, Any]:
    """The metadata a checkpoint of step ``step`` carries: its step and the chain (the run's
    ancestors, then this run: its folder, where it started, the step, its config)."""
    here = {
        "run": str(Path(run_dir).resolve()),
        "init_from": record["init_from"] if record else None,
        "step": step,
        "config": config,
    }
    return {"step": step, "lineage": [*(record["ancestors"] if record else []), here]}


def lineage_line(record: dict[str, Any] | None) -> str | None:
    """One readable line on where a run started (None: fresh weights)."""
    if record is None:
        return None
    src = record["init_from"]
    step = "" if src.get("step") is None else f" (step {src['step']})"
    chain = len(record.get("ancestors") or [])
    return f"started from {src['path']}{step}; {chain} earlier run(s) in its lineage"
