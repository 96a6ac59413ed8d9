"""The KV-cache sampling loop of the in-process backend: one batch of rows, token by token.

Our own loop rather than ``model.generate`` because each row needs its own seeded generator
(see :mod:`.client`), the raw log-prob of each sampled token, and constrained rows
(:mod:`.constrained`) feed their forced runs in one pass (jump-forward). The model is reached
only through ``forward`` (one forward pass, adapters already chosen by the caller), so this
module knows no peft and no tokenizer: :class:`~.hf_backend.HFBackend` decodes the tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch

from leaguezero.diplomacy.llm.client import GenerationRequest
from leaguezero.diplomacy.llm.orders.constrained import RegexMachine

__all__ = ["cache_argument", "constrained_token", "sample_batch", "sample_index"]


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
    machine: RegexMachine, logits: torch.Tensor, temperature: float, gen: torch.Generator
) -> tuple[int, float]:
    """The next token among the machine's allowed ones and its masked log-prob (at
    ``temperature``, raw when greedy: see :func:`sample_batch`)."""
    allowed = machine.allowed()
    if len(allowed) == 1:  # forced: probability 1 under the constrained policy
        machine.step(allowed[0])
        return allowed[0], 0.0
    sub = logits[allowed]
    pick = sample_index(sub, temperature, gen)
    token = allowed[pick]
    machine.step(token)
    scaled = sub / temperature if temperature > 0 else sub
    return token, float(torch.log_softmax(scaled, dim=-1)[pick])


def sample_batch(
    forward: Callable[..., Any],
    rows: list[GenerationRequest],
    encoded: list[list[int]],
    machines: list[RegexMachine | None],
    *,
    pad_id: int,
    eos_ids: Collection[int],
    jump_forward: bool,
    device: torch.device,
    cache_arg: str = "cache",
) -> tuple[list[list[int]], list[list[float]], list[str]]:
    """Sample one left-padded batch over the KV cache.

    Args:
        forward: one forward pass of the model (keyword arguments of a transformers causal LM).
        rows: the requests (seed, temperature, max_new_tokens of each row).
        encoded: each row's prompt token ids.
        machines: each row's constraint, or None for free decoding.
        pad_id, eos_ids: the tokenizer's padding token and end-of-sequence tokens.
        jump_forward: feed a constrained row's forced tokens in one pass.
        device: where the model runs.
        cache_arg: the forward's KV-cache keyword (:func:`cache_argument`).

    Returns:
        ``(tokens, logprobs, finish)`` per row: the sampled token ids, each one's log-prob
        under the sampling distribution (the logits divided by the row's temperature, as
        the trainer scores them with ``train.score_temperature: sampling``, so the sampler's
        and the trainer's numbers agree; raw logits for a greedy row, which trains nothing),
        and ``"stop"`` or ``"length"``.
    """
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
    out = forward(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    logits_next = out.logits[:, -1, :]  # [B, V] each row's next-token logits
    next_pos = positions[:, -1] + 1  # [B]
    temps = torch.tensor([r.temperature if r.temperature > 0 else 1.0 for r in rows])
    temps = temps.to(device)[:, None]
    while True:
        logits = logits_next.float()
        log_p = torch.log_softmax(logits / temps, dim=-1)
        chunks: list[list[int]] = [[] for _ in rows]
        for b, r in enumerate(rows):
            if not active[b]:
                continue
            machine = machines[b]
            if machine is not None:
                token, logprob = constrained_token(machine, logits[b], r.temperature, generators[b])
            else:
                token = sample_index(logits[b], r.temperature, generators[b])
                logprob = float(log_p[b, token])
            chunk = chunks[b]
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
        if not any(active):
            break
        # Feed each live row its chunk; rows differ in length, the rest is masked padding.
        lengths = [len(chunks[b]) if active[b] else 0 for b in range(batch)]
        width = max(lengths)
        step_ids = torch.full((batch, width), pad_id, dtype=torch.long)
        step_mask = torch.zeros((batch, width), dtype=torch.long)
        for b, n in enumerate(lengths):
            if n:
                step_ids[b, :n] = torch.tensor(chunks[b], dtype=torch.long)
                step_mask[b, :n] = 1
        mask = torch.cat([mask, step_mask.to(device)], dim=1)
        step_pos = next_pos[:, None] + torch.arange(width, device=device)[None, :]
        out = forward(
            input_ids=step_ids.to(device),
            attention_mask=mask,
            position_ids=step_pos,
            **{cache_arg: _returned_cache(out)},
            use_cache=True,
            logits_to_keep=width,
        )
        last = torch.tensor([max(n - 1, 0) for n in lengths], device=device)
        logits_next = out.logits[torch.arange(batch, device=device), last]
        next_pos = next_pos + torch.tensor(lengths, device=device)
    return tokens, logprobs, finish
