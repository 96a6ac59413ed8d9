"""A sampling batch's prompts prefilled without padding: one packed sequence per adapter.

:func:`.sampler.sample_batch` used to prefill its rows left-padded to the longest, so every
linear, norm and rotary ran over the padding and attention took a ``[B, 1, q, kv]`` padding
mask (torch's CPU flash kernel with a mask: ~200 GFLOP/s, and the padded work besides). Here
the rows that share an adapter run as **one sequence of their prompts laid end to end** (no
padding token anywhere), and attention runs **row by row** on each row's own keys: a prompt's
queries over its cached prefix and its own tokens, causal, grouped-query heads native
(``enable_gqa``). The growing cache (:func:`.sampler.growing_cache`) takes each row's keys
and values into that row's slots, **right-aligned layout**: row ``b``'s prompt fills columns
``0 .. len_b``, the columns up to the longest prompt are masked, and decoding appends every
row at the same column as before (the decoding passes' 2D mask covers the gap).

How a forward knows: :func:`prefill` sets a :class:`Plan` in a context variable (per thread:
lockstep games sample in their own threads) around each adapter's forward; the growing
cache's ``update`` calls :meth:`Plan.write` and :func:`.cpu_speed.cpu_attention` calls
:func:`attention` while it is set. Only a model that runs ``cpu_attention`` may be prefilled
so (``HFBackend.cpu_attention``): the plan counts the layers that attended through it and a
forward that bypassed it raises instead of returning another model's numbers.

The same tokens and log-probs as the padded batch and as one row at a time (float32, within
1e-5: ``tests/diplomacy/llm/model/test_packed_prefill.py``); ``benchmarks/llm_tokens.py`` and
``benchmarks/llm_eval_game.py`` measure what it buys.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["Plan", "Segment", "attention", "current_plan", "prefill"]


@dataclass(frozen=True)
class Segment:
    """One row's prompt in a packed pass: batch row ``row``, its tokens at ``offset ..
    offset + length`` of the packed sequence, written to cache columns ``start .. start +
    length`` (``start``: the cached prefix's length)."""

    row: int
    offset: int
    length: int
    start: int


@dataclass
class Plan:
    """A packed forward's segments and the cache layers they write to."""

    segments: list[Segment]
    layers: Sequence[Any]
    attended: set[int] = field(default_factory=set)
    _masks: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    def write(self, layer: Any, keys: torch.Tensor, values: torch.Tensor) -> None:
        """A layer's packed keys and values (``[1, H, T, D]``) into each row's slots."""
        for s in self.segments:
            end = s.start + s.length
            layer.kbuf[s.row, :, s.start : end] = keys[0, :, s.offset : s.offset + s.length]
            layer.vbuf[s.row, :, s.start : end] = values[0, :, s.offset : s.offset + s.length]

    def causal_mask(self, queries: int, keys: int) -> torch.Tensor:
        """Query ``i`` sees keys ``0 .. keys - queries + i`` (the queries are the last of the
        keys' positions); one per shape for the pass, shared by its layers."""
        mask = self._masks.get((queries, keys))
        if mask is None:
            mask = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)
            self._masks[(queries, keys)] = mask
        return mask


_PLAN: contextvars.ContextVar[Plan | None] = contextvars.ContextVar("packed_plan", default=None)


def current_plan() -> Plan | None:
    """The packed pass running in this thread, if any."""
    return _PLAN.get()


def attention(
    plan: Plan, layer_idx: int, query: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """Each segment's queries (``query``: ``[1, H, T, D]``) over its row's cached keys and
    values, causal; ``[1, T, H, D]`` as transformers' attention functions return it."""
    plan.attended.add(layer_idx)
    layer = plan.layers[layer_idx]
    out = query.new_empty((1, query.shape[2], query.shape[1], query.shape[3]))
    for s in plan.segments:
        end = s.start + s.length
        q = query[:, :, s.offset : s.offset + s.length]
        k = layer.kbuf[s.row : s.row + 1, :, :end].to(query.dtype)
        v = layer.vbuf[s.row : s.row + 1, :, :end].to(query.dtype)
        # With a cached prefix the queries are the keys' last positions: an explicit mask
        # (sdpa's is_causal aligns them with the first).
        mask = plan.causal_mask(s.length, end) if s.start else None
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=not s.start, scale=scaling, enable_gqa=True
        )
        out[:, s.offset : s.offset + s.length] = o.transpose(1, 2)
    return out


def prefill(
    forward: Callable[..., Any],
    cache: Any,
    encoded: list[list[int]],
    row_keys: Sequence[Hashable],
    prefix: tuple[int, dict[Hashable, list[tuple[torch.Tensor, torch.Tensor]]]],
    kv_like: tuple[int, int, torch.dtype],
    capacity: int,
    cache_arg: str,
    device: torch.device,
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prefill the batch's prompts into ``cache`` (a growing cache, every layer) packed, one
    forward per adapter (``row_keys[b]``: row ``b``'s adapter version; rows with equal keys
    share a pass, so rows of different adapters must have different keys), each row's cached
    prefix (``prefix``: its length and the entries per
    adapter version, :class:`.prefix_cache.PrefixCache`) seeded first.

    ``kv_like``: the key/value heads, head size and the cache's dtype (when no prefix seeds
    it). Returns the last forward's output (its cache), every row's next-token logits (or
    hidden states: see ``head`` in :func:`.sampler.sample_batch`) ``[B, V]``, the right-aligned
    attention mask ``[B, width]`` and each row's next position ``[B]``."""
    length, entries = prefix
    batch, width = len(encoded), max(len(ids) for ids in encoded)
    # Every row keeps at least one token of its own: its next-token logits come from it.
    length = min(length, min(len(ids) for ids in encoded) - 1)
    heads, dim, dtype = kv_like
    layers = cache.layers
    for i, layer in enumerate(layers):
        if length:
            keys = torch.cat([entries[k][i][0][:, :, :length] for k in row_keys])
            values = torch.cat([entries[k][i][1][:, :, :length] for k in row_keys])
        else:
            keys = torch.empty((batch, heads, 0, dim), dtype=dtype, device=device)
            values = keys
        layer.seed(keys, values, capacity)
    groups: dict[Hashable, list[int]] = {}
    for b, key in enumerate(row_keys):
        groups.setdefault(key, []).append(b)
    picked: list[torch.Tensor | None] = [None] * batch
    out = None
    for rows in groups.values():
        segments, ids, positions, offset = [], [], [], 0
        for b in rows:
            own = encoded[b][length:]
            segments.append(Segment(b, offset, len(own), length))
            ids.extend(own)
            positions.extend(range(length, len(encoded[b])))
            offset += len(own)
        plan = Plan(segments, layers)
        last = torch.tensor([s.offset + s.length - 1 for s in segments], device=device)
        token = _PLAN.set(plan)
        try:
            out = forward(
                input_ids=torch.tensor([ids], dtype=torch.long, device=device),
                # A prepared 4D mask: transformers builds none (the plan's attention masks).
                attention_mask=torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device),
                position_ids=torch.tensor([positions], dtype=torch.long, device=device),
                use_cache=True,
                logits_to_keep=last,
                adapter_rows=[rows[0]],
                **{cache_arg: cache},
            )
        finally:
            _PLAN.reset(token)
        if len(plan.attended) != len(layers):
            raise RuntimeError(
                "a packed prefill needs leaguezero's CPU attention (cpu_speed.cpu_attention) "
                f"in every layer; {len(plan.attended)} of {len(layers)} attended through it"
            )
        for i, b in enumerate(rows):
            picked[b] = out.logits[0, i]
    for layer in layers:
        for b, ids in enumerate(encoded):  # the masked gap: zeros (0 x garbage may be NaN)
            layer.kbuf[b, :, len(ids) : width] = 0
            layer.vbuf[b, :, len(ids) : width] = 0
        layer.fill_to(width)
    lengths = torch.tensor([len(ids) for ids in encoded], device=device)
    mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
    return out, torch.stack(picked), mask, lengths  # type: ignore[arg-type]
