"""Replay shards (PRD §10): safetensors tensors plus a small ``.meta.json``, written atomically.

A shard holds, per decision of the encoded player to move:

* ``features`` float32 [N, F]
* ``legal``    uint8   [N, A]   (1 = legal)
* ``pi``       float32 [N, A]   normalised visit counts (the policy target)
* ``z``        float32 [N]      final result for that player: +1 win, 0 draw, -1 loss
* ``z_margin`` float32 [N]      tanh(score difference / margin_scale)

The tensor file is renamed into place first and the meta file last, so a shard counts as complete
only once its meta exists; a worker killed mid-write leaves at most a hidden ``.tmp`` file and
never damages earlier shards. Readers check ``shard_format_version`` and the schema ids.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save

from leaguezero.common.atomic import atomic_write_bytes, atomic_write_json

SHARD_FORMAT_VERSION = 1
_ITER_DIR = re.compile(r"^iter_(\d{4,})$")


class ReplayError(ValueError):
    """A shard that cannot be used: wrong version or schema, or inconsistent contents."""


@dataclass(frozen=True)
class ShardSchema:
    protocol_version: int
    feature_schema_id: int
    action_space_id: str
    ruleset_id: str
    num_features: int
    num_actions: int

    def as_dict(self) -> dict[str, int | str]:
        return dict(self.__dict__)


@dataclass
class Batch:
    features: np.ndarray  # [N, F] float32
    legal: np.ndarray  # [N, A] uint8
    pi: np.ndarray  # [N, A] float32
    z: np.ndarray  # [N] float32
    z_margin: np.ndarray  # [N] float32

    def __len__(self) -> int:
        return int(self.z.shape[0])


def iteration_dir(replay_dir: str | os.PathLike, iteration: int) -> Path:
    return Path(replay_dir) / f"iter_{iteration:04d}"


class ShardWriter:
    """Buffers samples in preallocated arrays and writes a shard each ``shard_samples`` samples.

    Shards are named ``shard_w{worker:02d}_{seq:05d}``; on restart a writer continues after the
    highest complete sequence number of its worker, so resumed workers never overwrite shards.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        schema: ShardSchema,
        *,
        worker: int = 0,
        shard_samples: int = 4096,
        extra_meta: dict | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.worker = worker
        self.capacity = shard_samples
        self.extra_meta = dict(extra_meta or {})
        f, a = schema.num_features, schema.num_actions
        self._buf = Batch(
            np.zeros((shard_samples, f), np.float32),
            np.zeros((shard_samples, a), np.uint8),
            np.zeros((shard_samples, a), np.float32),
            np.zeros(shard_samples, np.float32),
            np.zeros(shard_samples, np.float32),
        )
        self._n = 0
        pattern = re.compile(rf"^shard_w{worker:02d}_(\d+)\.meta\.json$")
        done = [int(m.group(1)) for p in self.out_dir.iterdir() if (m := pattern.match(p.name))]
        self._seq = max(done, default=-1) + 1
        self.shards_written = 0
        self.samples_written = 0

    def add(self, batch: Batch) -> None:
        """Append samples; full shards are written as they fill."""
        start = 0
        while start < len(batch):
            take = min(self.capacity - self._n, len(batch) - start)
            sl = slice(self._n, self._n + take)
            src = slice(start, start + take)
            self._buf.features[sl] = batch.features[src]
            self._buf.legal[sl] = batch.legal[src]
            self._buf.pi[sl] = batch.pi[src]
            self._buf.z[sl] = batch.z[src]
            self._buf.z_margin[sl] = batch.z_margin[src]
            self._n += take
            start += take
            if self._n == self.capacity:
                self.flush()

    def flush(self) -> Path | None:
        """Write buffered samples (if any) as one shard; returns its path."""
        if self._n == 0:
            return None
        n = self._n
        name = f"shard_w{self.worker:02d}_{self._seq:05d}"
        tensors = {
            "features": self._buf.features[:n],
            "legal": self._buf.legal[:n],
            "pi": self._buf.pi[:n],
            "z": self._buf.z[:n],
            "z_margin": self._buf.z_margin[:n],
        }
        path = self.out_dir / f"{name}.safetensors"
        atomic_write_bytes(path, save({k: np.ascontiguousarray(v) for k, v in tensors.items()}))
        meta = {
            "shard_format_version": SHARD_FORMAT_VERSION,
            **self.schema.as_dict(),
            "num_samples": n,
            "worker": self.worker,
            "seq": self._seq,
            **self.extra_meta,
        }
        atomic_write_json(self.out_dir / f"{name}.meta.json", meta)  # last: marks completion
        self._seq += 1
        self._n = 0
        self.shards_written += 1
        self.samples_written += n
        return path


def complete_shards(folder: str | os.PathLike) -> list[Path]:
    """Tensor files of the complete shards (those with a meta file) in ``folder``, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p.with_name(p.name[: -len(".meta.json")] + ".safetensors")
        for p in folder.glob("shard_*.meta.json")
    )


def read_shard(path: str | os.PathLike, expect: ShardSchema | None = None) -> Batch:
    """Load one shard, checking its format version and (if given) the schema ids."""
    path = Path(path)
    meta_path = path.with_name(path.name[: -len(".safetensors")] + ".meta.json")
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise ReplayError(f"shard {path} has no meta file (incomplete write?)") from None
    if meta.get("shard_format_version") != SHARD_FORMAT_VERSION:
        raise ReplayError(
            f"shard {path} has format version {meta.get('shard_format_version')}; "
            f"this build reads {SHARD_FORMAT_VERSION}"
        )
    if expect is not None:
        for key, want in expect.as_dict().items():
            if meta.get(key) != want:
                raise ReplayError(
                    f"shard {path} has {key}={meta.get(key)!r} but {want!r} is required "
                    "(generated by another feature/rules version; start a new run or window)"
                )
    t = load_file(str(path))
    batch = Batch(t["features"], t["legal"], t["pi"], t["z"], t["z_margin"])
    if len(batch) != meta["num_samples"]:
        raise ReplayError(
            f"shard {path} holds {len(batch)} samples, meta says {meta['num_samples']}"
        )
    return batch


def window_iterations(replay_dir: str | os.PathLike, upto: int, window: int) -> list[int]:
    """Iterations ``upto - window + 1 .. upto`` that have a replay folder."""
    have = {
        int(m.group(1))
        for p in Path(replay_dir).glob("iter_*")
        if (m := _ITER_DIR.match(p.name)) is not None
    }
    return [i for i in range(max(0, upto - window + 1), upto + 1) if i in have]


def load_window(
    replay_dir: str | os.PathLike, iterations: Iterable[int], expect: ShardSchema | None
) -> Batch:
    """Concatenate every complete shard of the given iterations."""
    parts = [
        read_shard(p, expect)
        for it in iterations
        for p in complete_shards(iteration_dir(replay_dir, it))
    ]
    if not parts:
        raise ReplayError(f"no complete replay shards under {replay_dir} for {list(iterations)}")
    return Batch(
        *(np.concatenate([getattr(b, k) for b in parts]) for k in Batch.__dataclass_fields__)
    )
