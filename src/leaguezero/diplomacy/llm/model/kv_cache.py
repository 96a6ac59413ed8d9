"""The sampler's KV cache: preallocated per layer, written in place (:func:`growing_cache`).

A row's prompt can be written into its own slots by a packed prefill
(:mod:`.packed_prefill`), which the cache's ``update`` defers to while one runs.
"""

from __future__ import annotations

from typing import Any

import torch

from leaguezero.diplomacy.llm.model import packed_prefill

__all__ = ["GrowingLayer", "growing_cache", "reserve"]


class GrowingLayer:
    """Marker base: see :func:`growing_cache`."""


def growing_cache(config: Any, *, float32: bool = False) -> Any | None:
    """A KV cache that does not copy itself at every step: each layer preallocates its keys and
    values (``[B, H, capacity, D]``, the capacity doubled when a step would overflow it),
    writes a step's new entries in place and hands attention a view of the filled part.
    transformers' ``DynamicCache`` concatenates the whole cache at every step (at batch 28 and
    ~600 positions, ~0.8 GB copied a step); its ``StaticCache`` attends over every preallocated
    position. Rows leave by ``batch_select_indices`` (a copy of the kept rows, done rarely: see
    :func:`.sampler.sample_batch`). ``float32``: the buffers hold float32 whatever the model's
    dtype (for :func:`.cpu_speed.cpu_attention`'s float32 matmuls, which then cast nothing a
    step; the values are the model's, rounded as it rounded them). None when the model's cache
    is not plain full attention at every layer (sliding windows, linear attention): then the
    model's own cache is used.
    """
    # Over 80 lines: a cache layer class defined inside (transformers' cache classes are
    # imported here, lazily), not one long body.
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - transformers without the layered cache
        return None

    class _Growing(DynamicLayer, GrowingLayer):
        def __init__(self) -> None:
            super().__init__()
            self.length = 0

        def lazy_initialization(self, key_states, value_states) -> None:
            self.device = key_states.device
            dtype = torch.float32 if float32 else key_states.dtype
            self.kbuf = key_states.new_empty(
                (*key_states.shape[:2], 0, key_states.shape[-1]), dtype=dtype
            )
            self.vbuf = value_states.new_empty(
                (*value_states.shape[:2], 0, value_states.shape[-1]), dtype=dtype
            )
            self.is_initialized = True

        def _reserve(self, needed: int) -> None:
            capacity = self.kbuf.shape[2]
            if needed <= capacity:
                return
            capacity = max(needed, 2 * capacity, 64)
            for name in ("kbuf", "vbuf"):
                old = getattr(self, name)
                buf = old.new_empty((*old.shape[:2], capacity, old.shape[-1]))
                buf[:, :, : self.length] = old[:, :, : self.length]
                setattr(self, name, buf)

        def reserve(self, needed: int) -> None:
            if self.is_initialized:
                self._reserve(needed)
            else:
                self._pending_capacity = needed

        def update(self, key_states, value_states, *args, **kwargs):
            plan = packed_prefill.current_plan()
            if plan is not None:  # rows' prompts packed: into each row's slots
                plan.write(self, key_states, value_states)
                return key_states, value_states
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            self._reserve(max(end, getattr(self, "_pending_capacity", 0)))
            self.kbuf[:, :, self.length : end] = key_states
            self.vbuf[:, :, self.length : end] = value_states
            self.length = end
            self.keys = self.kbuf[:, :, :end]
            self.values = self.vbuf[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def seed(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
            """Start the cache with these entries (``[B, H, T, D]``: a cached prompt prefix
            in each row's slots, :func:`sample_batch`), room for ``capacity`` positions."""
            dtype = torch.float32 if float32 else keys.dtype
            self.device = keys.device
            shape = (*keys.shape[:2], max(capacity, keys.shape[2]), keys.shape[-1])
            self.kbuf = keys.new_empty(shape, dtype=dtype)
            self.vbuf = values.new_empty(shape, dtype=dtype)
            self.kbuf[:, :, : keys.shape[2]] = keys
            self.vbuf[:, :, : keys.shape[2]] = values
            self.length = keys.shape[2]
            self.keys = self.kbuf[:, :, : self.length]
            self.values = self.vbuf[:, :, : self.length]
            self.is_initialized = True

        def fill_to(self, length: int) -> None:
            """The first ``length`` columns count as filled (after a packed prefill)."""
            self.length = length
            self.keys = self.kbuf[:, :, :length]
            self.values = self.vbuf[:, :, :length]

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if not self.is_initialized:
                return
            self.kbuf = self.kbuf.index_select(0, indices)
            self.vbuf = self.vbuf.index_select(0, indices)
            self.keys = self.kbuf[:, :, : self.length]
            self.values = self.vbuf[:, :, : self.length]

        def crop(self, tokens_to_remove: int) -> None:  # pragma: no cover - not used here
            raise NotImplementedError("a growing cache is not cropped")

    cache = DynamicCache(config=config)
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [_Growing() for _ in cache.layers]
    return cache


def reserve(cache: Any, needed: int) -> None:
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, GrowingLayer):
            layer.reserve(needed)
