"""Supervised training of the base LM on the corpus: next-token loss on the answer tokens only
(or, with ``prompt_loss``, the prompts' too), length-bucketed batches, AdamW with warm-up and
cosine decay; bfloat16 autocast where the CPU has native bf16 matmuls."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from leaguezero.common.hardware import cpu_has_native_bf16
from leaguezero.diplomacy.llm.base.settings import PretrainSettings


def _batches(lengths: Sequence[int], batch_tokens: int, rng: np.random.Generator):
    """Index batches of similar lengths, about ``batch_tokens`` padded tokens each, shuffled."""
    order = np.argsort(np.asarray(lengths) + rng.uniform(0, 8, len(lengths)))
    batches, current, width = [], [], 0
    for i in order:
        width_if = max(width, lengths[i])
        if current and width_if * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, width_if = [], lengths[i]
        current.append(int(i))
        width = width_if
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def train_model(
    model,
    encoded: Sequence[tuple[list[int], list[int]]],
    settings: PretrainSettings,
    *,
    progress: Callable[[int, int, float], None] | None = None,
    max_seconds: float | None = None,
) -> list[dict[str, float]]:
    """Supervised training on the answer tokens; returns the loss curve (every 50 steps).

    With ``settings.prompt_loss == 0`` (the default) rows are left-padded so every answer ends
    at the right edge and the model computes the logits of the answer positions only
    (``logits_to_keep``): a real model's head over a 49k-152k vocabulary at every prompt
    position would be most of the memory and a fifth of the compute. ``max_seconds``: stop
    after the step that passes this much training time (the curve says how far it got).
    """
    rng = np.random.default_rng(settings.seed)
    lengths = [len(p) + len(a) for p, a in encoded]
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95)
    )

    def lr_at(step: int) -> float:
        if step < settings.warmup:
            return settings.lr * (step + 1) / settings.warmup
        frac = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
        return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    autocast = cpu_has_native_bf16()
    pad = model.config.pad_token_id
    if pad is None:
        pad = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    answers_only = settings.prompt_loss == 0
    model.train()
    curve: list[dict[str, float]] = []
    step, window, window_tokens = 0, 0.0, 0
    started = time.perf_counter()
    while step < settings.steps:
        for batch in _batches(lengths, settings.batch_tokens, rng):
            if step >= settings.steps:
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            rows = [encoded[i] for i in batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                if answers_only:
                    loss = _answer_loss(model, rows, pad)
                else:
                    loss = _sequence_loss(model, rows, pad, settings.prompt_loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            window += float(loss.detach())
            window_tokens += 1
            out_of_time = max_seconds is not None and time.perf_counter() - started > max_seconds
            if step % 50 == 0 or step == settings.steps or out_of_time:
                curve.append(
                    {
                        "step": step,
                        "loss": round(window / window_tokens, 5),
                        "seconds": round(time.perf_counter() - started, 1),
                    }
                )
                window, window_tokens = 0.0, 0
            if progress is not None:
                progress(step, settings.steps, float(loss.detach()))
            if out_of_time:
                model.eval()
                return curve
    model.eval()
    return curve


def _answer_loss(model, rows: Sequence[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """Mean next-token loss over the answers' tokens, from the answer positions' logits only
    (rows left-padded; positions counted from each row's first real token)."""
    width = max(len(p) + len(a) for p, a in rows)
    answer = max(len(a) for _, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    targets = torch.full((len(rows), answer), -100, dtype=torch.long)
    for b, (p, a) in enumerate(rows):
        ids[b, width - len(p) - len(a) :] = torch.tensor(p + a)
        mask[b, width - len(p) - len(a) :] = 1
        targets[b, answer - len(a) :] = torch.tensor(a)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=answer + 1
    ).logits[:, :-1]  # [B, answer, V]: column j predicts the answer's token j
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )


def _sequence_loss(
    model, rows: Sequence[tuple[list[int], list[int]]], pad: int, prompt_weight: float
) -> torch.Tensor:
    """Weighted next-token loss over every position (answers weight 1, prompts
    ``prompt_weight``): the full ``[B, L, V]`` logits."""
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    weights = torch.zeros((len(rows), width), dtype=torch.float32)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (p, a) in enumerate(rows):
        ids[b, : len(p) + len(a)] = torch.tensor(p + a)
        weights[b, 1 : len(p)] = prompt_weight  # token 0 has no prediction
        weights[b, len(p) : len(p) + len(a)] = 1.0
        mask[b, : len(p) + len(a)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits
    # Token t is predicted at position t - 1; weighted mean over the tokens that count.
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        ids[:, 1:].reshape(-1),
        reduction="none",
    ).view(len(rows), width - 1)
    w = weights[:, 1:]
    return (nll * w).sum() / w.sum().clamp(min=1e-9)
