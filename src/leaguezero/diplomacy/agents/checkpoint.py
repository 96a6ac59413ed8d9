"""Reading a Diplomacy policy checkpoint: its format, schema, features, config and checksum.

A checkpoint (:meth:`~leaguezero.diplomacy.agents.policy.DiplomacyPolicy.save`) is a
``torch.save`` dict: ``format``, ``schema_version``, ``feature_schema_id``, the network
``config``, the ``state_dict``, its ``checksum`` and optional ``extra``. Schema versions:

- 1: ``config`` holds ``hidden``, ``layers``, ``loc_embedding``: every unit's order chosen
  independently, no value head (the shipped ``pretrained`` and every run before issue 53);
- 2: ``config`` also holds ``decoder`` (``independent`` | ``sequential``) and ``value_head``
  (a bool);
- 3: ``config`` also holds ``attention`` (heads of a self-attention layer over the map's
  locations, at least 1): the network of
  :class:`~leaguezero.diplomacy.agents.policy.PolicyConfig`. A network without attention is
  still written as schema 2, so older readers keep reading it.

All three are read (an earlier config gets the later settings' defaults, so an old checkpoint
plays exactly as before); any other version, format or feature schema is a one-line
:class:`CheckpointError`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from leaguezero.az.checkpoint import state_checksum, torch_load_reason
from leaguezero.diplomacy.game.features import FEATURE_SCHEMA_ID

CHECKPOINT_FORMAT = "leaguezero.diplomacy.agents.policy"
CHECKPOINT_SCHEMA_VERSION = 3  # the newest written (module doc); READABLE_SCHEMA_VERSIONS are read
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
DECODERS = ("independent", "sequential")

# The sizes a checkpoint may ask for: a damaged or hostile config must not allocate gigabytes.
_CONFIG_BOUNDS = {"hidden": 4096, "layers": 64, "loc_embedding": 1024}


class CheckpointError(ValueError):
    """A policy checkpoint that is missing, unreadable, or of another format/version/schema."""


def read_checkpoint(path: str | Path) -> dict:
    """The checked contents of a policy checkpoint (module doc); raises :class:`CheckpointError`."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"policy checkpoint {path} does not exist")
    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointError(f"policy checkpoint {path} is unreadable (an empty file)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a truncated or foreign file
        reason = torch_load_reason(err)
        raise CheckpointError(f"policy checkpoint {path} is unreadable ({reason})") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a leaguezero Diplomacy policy checkpoint")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise CheckpointError(
            f"policy checkpoint {path} has schema_version {version!r}, this leaguezero reads "
            f"{' and '.join(map(str, READABLE_SCHEMA_VERSIONS))}; use a matching leaguezero"
        )
    if data.get("feature_schema_id") != FEATURE_SCHEMA_ID:
        raise CheckpointError(
            f"policy checkpoint {path} uses features {data.get('feature_schema_id')!r}, this "
            f"leaguezero computes {FEATURE_SCHEMA_ID!r}"
        )
    _check_config(path, data.get("config"), version)
    state, checksum = data.get("state_dict"), data.get("checksum")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"policy checkpoint {path} has no state_dict of tensors")
    if checksum is not None and checksum != state_checksum(state):
        raise CheckpointError(
            f"policy checkpoint {path} is damaged: its weights do not match the checksum it "
            "carries; use another checkpoint (e.g. an earlier one of the run)"
        )
    return data


def _check_config(path: Path, config: object, version: int) -> None:
    sizes_ok = isinstance(config, dict) and all(
        isinstance(config.get(name), int) and 1 <= config[name] <= bound
        for name, bound in _CONFIG_BOUNDS.items()
    )
    if not sizes_ok:
        shown = (
            {k: str(v)[:20] for k, v in list(config.items())[:5]}
            if isinstance(config, dict)
            else None
        )
        raise CheckpointError(
            f"policy checkpoint {path} has a network config outside this leaguezero's bounds "
            f"({shown}; at most {_CONFIG_BOUNDS}); use another checkpoint"
        )
    assert isinstance(config, dict)
    known = {*_CONFIG_BOUNDS, *(("decoder", "value_head") if version >= 2 else ())}
    known |= {"attention"} if version >= 3 else set()
    if set(config) - known:
        raise CheckpointError(
            f"policy checkpoint {path} (schema {version}) has unknown network settings "
            f"{sorted(set(config) - known)}; use a matching leaguezero"
        )
    if config.get("decoder", DECODERS[0]) not in DECODERS:
        raise CheckpointError(
            f"policy checkpoint {path} has decoder {str(config['decoder'])[:20]!r}, this "
            f"leaguezero knows {', '.join(DECODERS)}"
        )
    if not isinstance(config.get("value_head", False), bool):
        raise CheckpointError(f"policy checkpoint {path} has a value_head that is not a bool")
    heads = config.get("attention", 0)
    if not (isinstance(heads, int) and 0 <= heads <= min(config["hidden"], 64)):
        raise CheckpointError(
            f"policy checkpoint {path} has attention {repr(heads)[:20]}, not 0-64 heads"
        )
