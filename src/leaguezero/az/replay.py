"""Replay shards: safetensors tensors plus a small ``.meta.json``, written atomically
(docs/reference/design.md#replay-checkpoints-and-logs).

A shard holds, per decision of the encoded player to move:

* ``features`` float32 [N, F]
* ``legal``    uint8   [N, A]   (1 = legal)
* ``pi``       float32 [N, A]   normalised visit counts (the policy target)
* ``z``        float32 [N]      final result for that player: +1 win, 0 draw, -1 loss
* ``z_margin`` float32 [N]      tanh(score difference / margin_scale)
* ``q``        float32 [N]      the search's root value (mean backed-up utility, mover's view),
                                 the bootstrapped part of the value target (``train.q_weight``)

The tensor file is renamed into place first and the meta file last, so a shard counts as complete
only once its meta exists; a worker killed mid-write leaves at most a hidden ``.tmp`` file and
never damages earlier shards. Readers check ``shard_format_version``, the schema ids, the
``sha256`` of the tensor file recorded in the meta, and that every float is finite: a damaged
shard is a :class:`ReplayError` naming it, never a silently NaN-trained candidate.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load, save

from leaguezero.common.atomic import atomic_write_bytes, atomic_write_json

SHARD_FORMAT_VERSION = 2  # 2: adds the root value ``q``
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
    q: np.ndarray  # [N] float32 root search value

    def __len__(self) -> int:
        return int(self.z.shape[0])


def iteration_dir(replay_dir: str | os.PathLike, iteration: int) -> Path:
    return Path(replay_dir) / f"iter_{iteration:04d}"


class ShardWriter:
    """Collects samples and writes a shard once ``shard_samples`` samples are pending.

    Shards end at :meth:`add` boundaries, so a caller that adds whole games gets shards of whole
    games, and the ``games`` count in each meta tells a resumed worker how many games are safely
    on disk. Shards are named ``shard_w{worker:02d}_{seq:05d}``; a restarted writer continues
    after the highest complete sequence number of its worker and never overwrites a shard.
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
        self._pending: list[Batch] = []
        self._pending_n = 0
        self._pending_games = 0
        pattern = re.compile(rf"^shard_w{worker:02d}_(\d+)\.meta\.json$")
        done = [int(m.group(1)) for p in self.out_dir.iterdir() if (m := pattern.match(p.name))]
        self._seq = max(done, default=-1) + 1
        self.shards_written = 0
        self.samples_written = 0

    def add(self, batch: Batch, games: int = 0) -> None:
        """Queue samples (``games`` whole games' worth, if the caller counts games)."""
        if len(batch) == 0 and games == 0:
            return
        f, a = self.schema.num_features, self.schema.num_actions
        if batch.features.shape[1:] != (f,) or batch.pi.shape[1:] != (a,):
            raise ReplayError(
                f"samples have shape F={batch.features.shape[1:]}, A={batch.pi.shape[1:]}; "
                f"the shard schema says F={f}, A={a}"
            )
        self._pending.append(batch)
        self._pending_n += len(batch)
        self._pending_games += games
        if self._pending_n >= self.capacity:
            self.flush()

    def flush(self) -> Path | None:
        """Write pending samples (if any) as one shard; returns its path."""
        if self._pending_n == 0:
            return None
        data = {
            key: np.ascontiguousarray(np.concatenate([getattr(b, key) for b in self._pending]))
            for key in Batch.__dataclass_fields__
        }
        data["legal"] = data["legal"].astype(np.uint8)
        n = self._pending_n
        name = f"shard_w{self.worker:02d}_{self._seq:05d}"
        path = self.out_dir / f"{name}.safetensors"
        payload = save(data)
        atomic_write_bytes(path, payload)
        meta = {
            "shard_format_version": SHARD_FORMAT_VERSION,
            **self.schema.as_dict(),
            "num_samples": n,
            "games": self._pending_games,
            "worker": self.worker,
            "seq": self._seq,
            **self.extra_meta,
            "sha256": hashlib.sha256(payload).hexdigest(),  # verified by read_shard
        }
        atomic_write_json(self.out_dir / f"{name}.meta.json", meta)  # last: marks completion
        self._seq += 1
        self._pending, self._pending_n, self._pending_games = [], 0, 0
        self.shards_written += 1
        self.samples_written += n
        return path


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name[: -len(".safetensors")] + ".meta.json")


def shard_meta(path: str | os.PathLike) -> dict:
    """The meta dict of a shard given its tensor path.

    Raises:
        ReplayError: the meta file is missing, not JSON, or not a JSON object.
    """
    meta_path = _meta_path(Path(path))
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise ReplayError(f"shard {path} has no meta file (incomplete write?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReplayError(
            f"shard meta {meta_path} is damaged ({type(err).__name__}); delete the shard and "
            "its .meta.json (its games are replayed on --resume)"
        ) from None
    if not isinstance(meta, dict):
        raise ReplayError(f"shard meta {meta_path} is not a JSON object; delete the shard")
    return meta


def games_on_disk(folder: str | os.PathLike, worker: int | None = None) -> int:
    """Games recorded in the complete shards of ``folder`` (optionally of one worker)."""
    total = 0
    for path in complete_shards(folder):
        meta = shard_meta(path)
        if worker is None or meta.get("worker") == worker:
            total += int(meta.get("games", 0))
    return total


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
    """Load one shard, checking its format version, schema ids, checksum and finiteness.

    Raises:
        ReplayError: one line naming the shard and what is wrong with it.
    """
    path = Path(path)
    meta = shard_meta(path)
    if meta.get("shard_format_version") != SHARD_FORMAT_VERSION:
        raise ReplayError(
            f"shard {path} has format version {meta.get('shard_format_version')}; "
            f"this build reads {SHARD_FORMAT_VERSION} (replay from an older leaguezero: start a "
            "new run, or delete the old iter_NNNN folders from the replay window)"
        )
    if expect is not None:
        for key, want in expect.as_dict().items():
            if meta.get(key) != want:
                raise ReplayError(
                    f"shard {path} has {key}={meta.get(key)!r} but {want!r} is required "
                    "(generated by another feature/rules version; start a new run or window)"
                )
    damaged = f"shard {path} is damaged"
    fix = "delete it and its .meta.json (or the whole iter_NNNN folder) and re-run"
    try:
        payload = path.read_bytes()
    except OSError as err:
        raise ReplayError(f"shard {path} cannot be read: {err.strerror or err}") from None
    want_sha = meta.get("sha256")
    if want_sha is not None and hashlib.sha256(payload).hexdigest() != want_sha:
        raise ReplayError(f"{damaged}: its checksum does not match its meta; {fix}")
    try:
        tensors = load(payload)
        batch = Batch(**{k: tensors[k] for k in Batch.__dataclass_fields__ if k in tensors})
    except Exception as err:  # safetensors raises several types for garbage payloads
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ReplayError(f"{damaged} ({reason}); {fix}") from None
    if len(batch) != meta.get("num_samples"):
        raise ReplayError(
            f"shard {path} holds {len(batch)} samples, meta says {meta.get('num_samples')}"
        )
    for key in Batch.__dataclass_fields__:
        values = getattr(batch, key)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise ReplayError(f"{damaged}: {key!r} holds NaN or infinite values; {fix}")
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
