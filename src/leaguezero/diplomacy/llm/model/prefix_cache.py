"""The prompt prefix every seat shares, prefilled once per adapter version.

Every prompt of a game opens with the same tokens (the chat template's system turn: the rules
and the answer format, ~80 tokens of SmolLM2's ~520), and a sampling batch prefilled them once
per row and phase. :class:`PrefixCache` learns where that shared part ends — the shortest common
prefix it has seen between two different prompts of at least ``min_tokens``, so a batch of one
row gains as much as a batch of seven — and keeps the keys and values of those tokens per
adapter version (an adapter's LoRA weights change its keys and values; the version is the
backend's :func:`adapter signature <leaguezero.diplomacy.llm.model.hf_backend.HFBackend>`, the
parameters' identities and in-place version counters, so an optimizer step or a reloaded
version misses). :func:`~.sampler.sample_batch` copies them into each row's slots of the KV
cache and prefills only the rest.

Exact: a causal model's keys and values of the first ``P`` tokens depend on those tokens only,
and positions count from each row's first token, so the cached entries are what the full
prefill computes, up to the rounding of a matmul of another shape (a test: the same tokens and
log-probs as without the cache within 1e-5 in float32).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["PrefixCache"]


@dataclass
class PrefixStats:
    """Counters for the metrics: batches served from the cache, prefixes computed, and the
    prompt tokens not prefilled thanks to it."""

    hits: int = 0
    misses: int = 0
    tokens_saved: int = 0


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """Per-adapter keys and values of the shared prompt prefix (module doc).

    ``min_tokens``: a shorter shared part is not worth a cache entry; ``max_entries``: adapter
    versions kept (least recently used dropped; an entry is a few MB: layers x 2 x KV heads x
    prefix x head size, e.g. 30 x 2 x 3 x 81 x 64 float32 = 3.7 MB for SmolLM2).
    """

    def __init__(self, min_tokens: int = 32, max_entries: int = 8) -> None:
        self.min_tokens = min_tokens
        self.max_entries = max_entries
        self.reference: tuple[int, ...] | None = None  # the first prompt seen
        self.boundary: int | None = None  # the shared part's length, once two prompts met
        self.stats = PrefixStats()
        self._entries: OrderedDict[Hashable, list[tuple[torch.Tensor, torch.Tensor]]] = (
            OrderedDict()
        )

    def observe(self, encoded: Sequence[Sequence[int]]) -> None:
        """Learn the shared part from these prompts (their common prefix with the first)."""
        for ids in encoded:
            if self.reference is None:
                self.reference = tuple(ids)
                continue
            shared = _common_length(self.reference, ids)
            if shared == len(ids) == len(self.reference):
                continue  # the same prompt: says nothing about where the shared part ends
            if shared >= self.min_tokens and (self.boundary is None or shared < self.boundary):
                if self.boundary is not None:
                    self._entries.clear()  # entries of the longer prefix no longer fit
                self.boundary = shared

    def prefix_length(self, encoded: Sequence[Sequence[int]]) -> int:
        """How many leading tokens of every row the cache can supply (0: none); at least one
        token of each row is left to prefill (its logits are the first draw's)."""
        if self.boundary is None or self.reference is None:
            return 0
        length = self.boundary
        prefix = self.reference[:length]
        for ids in encoded:
            if len(ids) <= length or tuple(ids[:length]) != prefix:
                return 0
        return length

    def get(self, key: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The layers' ``(keys, values)`` (``[1, H, P, D]``) of ``key``'s version, or None."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: Hashable, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self._entries[key] = layers
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    @property
    def nbytes(self) -> int:
        """Bytes the entries hold."""
        return sum(
            k.element_size() * k.nelement() + v.element_size() * v.nelement()
            for layers in self._entries.values()
            for k, v in layers
        )
