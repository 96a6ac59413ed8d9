"""The trainer's log-probs come from the answer positions only (``logits_to_keep``) and equal
the full ``[B, L, V]`` logits' numbers, values and gradients, on a tiny model built here."""

from __future__ import annotations

import pytest

pytest.importorskip("peft")

import torch

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from tests.diplomacy.tiny_lm import build_tiny_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> HFBackend:
    backend = HFBackend.from_pretrained(build_tiny_lm(tmp_path_factory.mktemp("tiny_lm")))
    backend.add_adapter("hero")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in backend.adapter_parameters("hero").items():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return backend


def full_logits_reference(backend, prompts, completions, allowed, adapter):
    """The obvious computation: each row alone, every position's logits, then the answer's."""
    rows = []
    with backend._one_adapter(backend._row_name(adapter)):
        for prompt, completion, row_allowed in zip(prompts, completions, allowed, strict=True):
            ids = backend.encode(prompt) + list(completion)
            logits = backend.model(input_ids=torch.tensor([ids])).logits[0].float()  # [L, V]
            steps = logits[len(ids) - len(completion) - 1 : len(ids) - 1]
            if row_allowed is not None:
                keep = torch.zeros_like(steps, dtype=torch.bool)
                for t, tokens in enumerate(row_allowed):
                    keep[t, list(tokens)] = True
                steps = steps.masked_fill(~keep, float("-inf"))
            target = torch.tensor(completion)[:, None]
            rows.append(torch.log_softmax(steps, -1).gather(1, target)[:, 0])
    return rows


def test_answer_positions_equal_full_logits_values_and_gradients(backend):
    vocab = len(backend.tokenizer)
    prompts = ["Spring 1901 FRANCE orders:", "A", "Fall 1901, movement. ENGLAND: F LON - NTH"]
    completions = [[5, 17, 40, 2], [9], [33, 33, 7, 12, 50, 3, 1]]
    # Row 1 decoded under a constraint: a few tokens allowed at each position.
    allowed = [None, None, [[33, 34], [33, 8, 90], list(range(vocab)), [12], [50, 51], [3], [1, 2]]]
    params = backend.trainable_parameters("hero")
    new = backend.logprobs(prompts, completions, "hero", allowed)
    ref = full_logits_reference(backend, prompts, completions, allowed, "hero")
    for a, b, c in zip(new, ref, completions, strict=True):
        assert a.shape == (len(c),)
        assert torch.allclose(a, b, atol=1e-5), (a, b)
    assert float(new[2][3].detach()) == 0.0  # one allowed token: probability 1
    grads_new = torch.autograd.grad(sum(r.sum() for r in new), params)
    grads_ref = torch.autograd.grad(sum(r.sum() for r in ref), params)
    for g_new, g_ref in zip(grads_new, grads_ref, strict=True):
        assert torch.isfinite(g_new).all()
        assert torch.allclose(g_new, g_ref, atol=1e-5, rtol=1e-4)


def test_answer_positions_keep_only_the_answers_logits(backend, monkeypatch):
    """The forward is asked for the answers' positions only, never [B, L, V]."""
    seen = []
    forward = backend._forward

    def spy(**kwargs):
        out = forward(**kwargs)
        seen.append((kwargs["input_ids"].shape, tuple(out.logits.shape)))
        return out

    monkeypatch.setattr(backend, "_forward", spy)
    prompt = "Spring 1901 FRANCE orders: " * 8
    with torch.no_grad():  # one padded batch (with gradients, rows of one length per pass)
        backend.logprobs([prompt, prompt + "x"], [[4, 5, 6], [7]], None)
    ((ids_shape, logits_shape),) = seen
    assert logits_shape[:2] == (2, 4)  # the longest answer + 1 positions
    assert ids_shape[1] > 40


def test_sampling_passes_the_kv_cache_by_the_current_keyword(backend):
    """transformers renamed the forward's ``past_key_values`` to ``cache`` (the old name warns
    and goes in 5.40): sampling over the KV cache must not use a deprecated keyword."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        out = backend.generate(["Spring 1901 FRANCE"] * 2, ["hero", None], 12, 1.0, seed=0)
    assert all(len(c.token_ids) == 12 or c.finish_reason == "stop" for c in out)


def test_gradient_checkpointing_gives_the_same_numbers(tmp_path):
    """``train.gradient_checkpointing``: the same log-probs and gradients, and sampling
    afterwards runs in eval mode (peft mixes adapters per row only there)."""
    backend = HFBackend.from_pretrained(build_tiny_lm(tmp_path / "lm"))
    backend.add_adapter("hero")
    with torch.no_grad():
        for name, param in backend.adapter_parameters("hero").items():
            if "lora_B" in name:
                param.fill_(0.05)
    params = backend.trainable_parameters("hero")
    prompts, completions = ["Spring 1901 FRANCE", "A PAR"], [[5, 6, 7], [8, 9]]
    plain = backend.logprobs(prompts, completions, "hero")
    grads_plain = torch.autograd.grad(sum(r.sum() for r in plain), params)
    backend.enable_gradient_checkpointing()
    checked = backend.logprobs(prompts, completions, "hero")
    grads_checked = torch.autograd.grad(sum(r.sum() for r in checked), params)
    backend.generate(["A PAR"] * 2, ["hero", None], 4, 0.0, seed=0)  # mixed adapters
    assert not backend.model.training
    for a, b in zip(plain, checked, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    for a, b in zip(grads_plain, grads_checked, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_log_prob_batches_are_bounded_in_rows_and_tokens():
    """A real model's prefill of many long rows holds its transient activations at once, so a
    batch is cut at max_batch_size rows and LOGPROB_BATCH_TOKENS padded tokens."""
    from leaguezero.diplomacy.llm.model.hf_logprobs import LOGPROB_BATCH_TOKENS, _token_chunks

    lengths = [100] * 10 + [900] * 20 + [LOGPROB_BATCH_TOKENS + 5]
    order = list(range(len(lengths)))
    chunks = _token_chunks(order, lengths, max_rows=16)
    assert [i for chunk in chunks for i in chunk] == order
    for chunk in chunks:
        assert len(chunk) <= 16
        widest = max(lengths[i] for i in chunk)
        assert len(chunk) == 1 or widest * len(chunk) <= LOGPROB_BATCH_TOKENS
    assert chunks[-1] == [30]  # a row longer than the budget still gets its own batch
