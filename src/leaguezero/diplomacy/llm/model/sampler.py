"""The KV-cache sampling loop of the in-process backend: one batch of rows, token by token.

Our own loop rather than ``model.generate`` because each row needs its own seeded generator
(see :mod:`~leaguezero.diplomacy.llm.client`), the raw log-prob of each sampled token, and
constrained rows (:mod:`~leaguezero.diplomacy.llm.orders.constrained`) feed their forced runs in one
pass (jump-forward). The model is reached only through ``forward`` (one forward pass, adapters
already chosen by the caller), so this module knows no peft and no tokenizer:
:class:`~.hf_backend.HFBackend` decodes the tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

import torch

from leaguezero.diplomacy.llm.client import GenerationRequest
from leaguezero.diplomacy.llm.model import packed_prefill
from leaguezero.diplomacy.llm.model.kv_cache import GrowingLayer, growing_cache, reserve
from leaguezero.diplomacy.llm.model.prefix_cache import PrefixCache
from leaguezero.diplomacy.llm.orders.constrained import Machine

__all__ = [
    "cache_argument",
    "constrained_token",
    "growing_cache",  # re-exported: callers build the sampler's cache from here
    "sample_batch",
    "sample_index",
]


def cache_argument(model: torch.nn.Module) -> str:
    """The keyword a causal LM's forward takes its KV cache by: ``cache`` (transformers that
    renamed it; ``past_key_values`` is deprecated there and removed in 5.40) or
    ``past_key_values`` (earlier 5.x)."""
    import inspect

    forward = getattr(model, "get_base_model", lambda: model)().forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _returned_cache(out: Any) -> Any:
    """The KV cache a forward pass returned, under either name (see :func:`cache_argument`)."""
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def sample_index(scores: torch.Tensor, temperature: float, generator: torch.Generator) -> int:
    """An index of ``scores`` (logits): the argmax at temperature 0, else a draw from
    ``softmax(scores / temperature)`` with ``generator``."""
    if temperature <= 0:
        return int(torch.argmax(scores))
    probs = torch.softmax(scores / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def constrained_token(
    machine: Machine,
    logits: torch.Tensor | Callable[[list[int]], torch.Tensor],
    temperature: float,
    gen: torch.Generator,
) -> tuple[int, float]:
    """The next token among the machine's allowed ones and its masked log-prob (at
    ``temperature``, raw when greedy: see :func:`sample_batch`). ``logits``: the row's logits
    ``[V]``, or a function giving the logits of the allowed tokens only (called only when more
    than one is allowed)."""
    allowed = machine.allowed()
    if len(allowed) == 1:  # forced: probability 1 under the constrained policy
        machine.step(allowed[0])
        return allowed[0], 0.0
    sub = logits(allowed) if callable(logits) else logits[allowed]
    pick = sample_index(sub, temperature, gen)
    token = allowed[pick]
    machine.step(token)
    scaled = sub / temperature if temperature > 0 else sub
    return token, float(torch.log_softmax(scaled, dim=-1)[pick])


def _prefix_entries(
    prefix_cache: PrefixCache,
    row_keys: Sequence[Hashable],
    forward: Callable[..., Any],
    encoded: list[list[int]],
    new_cache: Callable[[], Any],
    cache_arg: str,
    device: torch.device,
) -> tuple[int, dict[Hashable, list[tuple[torch.Tensor, torch.Tensor]]]]:
    """The shared prefix's length for these prompts and its keys and values per adapter
    version of the rows (computed once per version, a one-row pass of the prefix); length 0
    when the cache has no prefix for them."""
    prefix_cache.observe(encoded)
    length = prefix_cache.prefix_length(encoded)
    if not length:
        return 0, {}
    entries: dict[Hashable, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for b, key in enumerate(row_keys):
        if key in entries:
            continue
        entry = prefix_cache.get(key)
        if entry is None:
            prefix = torch.tensor([encoded[b][:length]], dtype=torch.long, device=device)
            scratch = new_cache()
            reserve(scratch, length)
            out = forward(
                input_ids=prefix,
                attention_mask=torch.ones_like(prefix),
                position_ids=torch.arange(length, device=device)[None, :],
                use_cache=True,
                logits_to_keep=1,
                adapter_rows=[b],
                **{cache_arg: scratch},
            )
            entry = [(x.keys.clone(), x.values.clone()) for x in _returned_cache(out).layers]
            prefix_cache.put(key, entry)
            prefix_cache.stats.misses += 1
        else:
            prefix_cache.stats.hits += 1
        entries[key] = entry
    return length, entries


def _seed_prefix(
    cache: Any,
    prefix: tuple[int, dict[Hashable, list[tuple[torch.Tensor, torch.Tensor]]]],
    row_keys: Sequence[Hashable],
    encoded: list[list[int]],
    width: int,
    capacity: int,
    prefix_cache: PrefixCache,
) -> int:
    """Fill ``cache`` with the shared prefix's keys and values (:func:`_prefix_entries`) in
    each row's slots; returns the first column the batch still prefills, or 0 when there is
    no prefix.

    Rows are left-padded, so row ``b``'s prefix sits at columns ``pad_b .. pad_b + P``; the
    batch prefills from ``start = min_b pad_b + P`` (the longest row's first own token), and a
    shorter row's prefix tokens from ``start`` on are fed again (their entries recomputed)."""
    length, entries = prefix
    layers = cache.layers
    if not length:
        return 0
    pads = [width - len(ids) for ids in encoded]
    start = min(pads) + length
    for i, layer in enumerate(layers):
        k0, v0 = entries[row_keys[0]][i]
        keys = k0.new_zeros((len(encoded), k0.shape[1], start, k0.shape[-1]))
        values = v0.new_zeros((len(encoded), v0.shape[1], start, v0.shape[-1]))
        for b, pad in enumerate(pads):
            if pad >= start:  # a short row: its prefix lies wholly in the prefilled columns
                continue
            k, v = entries[row_keys[b]][i]
            keys[b, :, pad:start] = k[0, :, : start - pad]
            values[b, :, pad:start] = v[0, :, : start - pad]
        layer.seed(keys, values, capacity)
    prefix_cache.stats.tokens_saved += sum(max(0, start - pad) for pad in pads)
    return start


# Rows that finished leave the batch once they are at least this share of it (each removal
# copies the kept rows' cache; a finished row left in costs attention over its cache).
LEAVE_SHARE = 0.25


def sample_batch(
    forward: Callable[..., Any],
    rows: list[GenerationRequest],
    encoded: list[list[int]],
    machines: list[Machine | None],
    *,
    pad_id: int,
    eos_ids: Collection[int],
    jump_forward: bool,
    device: torch.device,
    cache_arg: str = "cache",
    new_cache: Callable[[], Any] | None = None,
    head: Callable[[torch.Tensor, list[int] | None], torch.Tensor] | None = None,
    prefix_cache: PrefixCache | None = None,
    row_keys: Sequence[Hashable] | None = None,
    packed: tuple[int, int, torch.dtype] | None = None,
) -> tuple[list[list[int]], list[list[float]], list[str]]:
    """Sample one left-padded batch over the KV cache.

    Args:
        forward: one forward pass of the model (keyword arguments of a transformers causal LM)
            and ``adapter_rows``: the batch positions' row indices (into ``rows``), for a
            caller that chooses adapters per row.
        rows: the requests (seed, temperature, max_new_tokens of each row).
        encoded: each row's prompt token ids.
        machines: each row's constraint, or None for free decoding.
        pad_id, eos_ids: the tokenizer's padding token and end-of-sequence tokens.
        jump_forward: feed a constrained row's forced tokens in one pass.
        device: where the model runs.
        cache_arg: the forward's KV-cache keyword (:func:`cache_argument`).
        new_cache: an empty KV cache for the first pass (:func:`growing_cache`); None or a
            None result: the model's own.
        head: None: ``forward`` returns logits; else it returns the float32 hidden states
            before the output head, and ``head(hidden, tokens)`` gives the logits of
            ``tokens`` (all when None): a constrained row's allowed tokens only, none for a
            forced one (:class:`.cpu_speed.Float32Head`).
        prefix_cache, row_keys: the shared prompt prefix's keys and values per adapter
            version (:mod:`.prefix_cache`; ``row_keys[i]``: row ``i``'s adapter version),
            copied into each row's slots instead of prefilled; only with ``new_cache``'s
            growing cache.
        packed: prefill the prompts packed, without padding (:mod:`.packed_prefill`: only
            for a model that attends through :func:`.cpu_speed.cpu_attention`), with a
            growing cache: the key/value heads, head size and the cache's dtype.

    Rows that finished leave the batch (:data:`LEAVE_SHARE`), so the slowest row does not
    keep every finished one in each pass; a row's draws do not depend on which rows share its
    batch (its own seeded generator, positions counted from its first token), and in float32
    neither do its numbers (in bf16 the rounding does, so a near tie may go otherwise).

    Returns:
        ``(tokens, logprobs, finish)`` per row: the sampled token ids, each one's log-prob
        under the sampling distribution (the logits divided by the row's temperature, as
        the trainer scores them with ``train.score_temperature: sampling``, so the sampler's
        and the trainer's numbers agree; raw logits for a greedy row, which trains nothing),
        and ``"stop"`` or ``"length"``.
    """
    # Over 80 lines: the decoding loop of every sampled row; its pass-to-pass state (the cache,
    # the rows still live, their constraint machines) stays in locals so a pass allocates
    # little, and benchmarks/llm_tokens.py times it as one piece.
    batch = len(rows)
    width = max(len(ids) for ids in encoded)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for b, ids in enumerate(encoded):
        input_ids[b, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[b, width - len(ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L] positions ignore left padding
    generators = []
    for r in rows:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(r.seed) & 0xFFFF_FFFF_FFFF_FFFF)
        generators.append(gen)
    tokens: list[list[int]] = [[] for _ in rows]
    logprobs: list[list[float]] = [[] for _ in rows]
    finish = ["length"] * batch
    active = [True] * batch
    live = list(range(batch))  # the row at each batch position
    cache = new_cache() if new_cache is not None else None
    growing = cache is not None and all(isinstance(x, GrowingLayer) for x in cache.layers)
    capacity = width + max(r.max_new_tokens for r in rows)
    # Each row's adapter version; unknown: a row of its own (a packed pass is one adapter's).
    keys = list(row_keys) if row_keys is not None else list(range(batch))
    prefix = (0, {})
    if growing and prefix_cache is not None and row_keys is not None:
        prefix = _prefix_entries(prefix_cache, keys, forward, encoded, new_cache, cache_arg, device)
    if growing and packed is not None:  # the prompts without padding (module doc there)
        out, logits_next, mask, next_pos = packed_prefill.prefill(
            forward, cache, encoded, keys, prefix, packed, capacity, cache_arg, device
        )
        if prefix[0]:  # each row keeps a token of its own (packed_prefill.prefill)
            taken = min(prefix[0], min(len(ids) for ids in encoded) - 1)
            prefix_cache.stats.tokens_saved += taken * batch  # type: ignore[union-attr]
    else:
        start = 0  # the first column prefilled: the columns before it are the cached prefix
        if growing and prefix[0]:
            start = _seed_prefix(cache, prefix, keys, encoded, width, capacity, prefix_cache)
        if cache is not None and not start:
            reserve(cache, capacity)
        out = forward(
            input_ids=input_ids[:, start:],
            attention_mask=mask,
            position_ids=positions[:, start:],
            use_cache=True,
            logits_to_keep=1,
            adapter_rows=live,
            **({cache_arg: cache} if cache is not None else {}),
        )
        logits_next = out.logits[:, -1, :]  # [B', V] each live row's next-token logits
        next_pos = positions[:, -1] + 1  # [B']
    temps = torch.tensor([r.temperature if r.temperature > 0 else 1.0 for r in rows])
    temps = temps.to(device)[:, None]
    while True:
        scores = logits_next.float()  # [B', V] logits, or [B', H] hidden states (head)
        # Free rows need every logit and the log-softmax; constrained ones their allowed
        # tokens' logits only.
        free = [pos for pos, b in enumerate(live) if active[b] and machines[b] is None]
        full: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if free:
            index = torch.tensor(free, device=device)
            picked = scores.index_select(0, index)
            logits = picked if head is None else head(picked, None)
            log_p = torch.log_softmax(logits / temps.index_select(0, index), dim=-1)
            full = {pos: (logits[i], log_p[i]) for i, pos in enumerate(free)}
        chunks: list[list[int]] = [[] for _ in live]
        for pos, b in enumerate(live):
            if not active[b]:
                continue
            r = rows[b]
            machine = machines[b]
            if machine is not None:
                row = scores[pos]
                logits_of = row if head is None else functools.partial(head, row)
                token, logprob = constrained_token(machine, logits_of, r.temperature, generators[b])
            else:
                row_logits, row_log_p = full[pos]
                token = sample_index(row_logits, r.temperature, generators[b])
                logprob = float(row_log_p[token])
            chunk = chunks[pos]
            while True:
                chunk.append(token)
                tokens[b].append(token)
                logprobs[b].append(logprob)
                if token in eos_ids or (machine is not None and machine.done):
                    active[b], finish[b] = False, "stop"
                    break
                if len(tokens[b]) >= r.max_new_tokens:
                    active[b] = False
                    break
                # Jump forward: a run of forced tokens (probability 1 under the
                # constraint) joins this step's input instead of costing a step each.
                allowed = machine.allowed() if machine is not None else ()
                if len(allowed) != 1 or not jump_forward:
                    break
                token, logprob = allowed[0], 0.0
                machine.step(token)
        alive = [pos for pos, b in enumerate(live) if active[b]]
        if not alive:
            break
        cache = _returned_cache(out)
        if len(live) - len(alive) >= max(1, LEAVE_SHARE * len(live)):
            keep = torch.tensor(alive, device=device)
            cache.batch_select_indices(keep)
            mask, next_pos, temps = mask[keep], next_pos[keep], temps[keep]
            chunks = [chunks[pos] for pos in alive]
            live = [live[pos] for pos in alive]
        # Feed each live row its chunk; rows differ in length, the rest is masked padding.
        lengths = [len(chunks[pos]) if active[b] else 0 for pos, b in enumerate(live)]
        width = max(lengths)
        step_ids = torch.full((len(live), width), pad_id, dtype=torch.long)
        step_mask = torch.zeros((len(live), width), dtype=torch.long)
        for pos, n in enumerate(lengths):
            if n:
                step_ids[pos, :n] = torch.tensor(chunks[pos], dtype=torch.long)
                step_mask[pos, :n] = 1
        mask = torch.cat([mask, step_mask.to(device)], dim=1)
        step_pos = next_pos[:, None] + torch.arange(width, device=device)[None, :]
        out = forward(
            input_ids=step_ids.to(device),
            attention_mask=mask,
            position_ids=step_pos,
            **{cache_arg: cache},
            use_cache=True,
            logits_to_keep=width,
            adapter_rows=live,
        )
        last = torch.tensor([max(n - 1, 0) for n in lengths], device=device)
        logits_next = out.logits[torch.arange(len(live), device=device), last]
        next_pos = next_pos + torch.tensor(lengths, device=device)
    return tokens, logprobs, finish
