"""The in-process sampler's speed paths give the numbers of the plain ones (issue 51).

Shows: a prepacked linear equals ``F.linear`` (values and input gradients); the fast LoRA
layer equals peft's own forward at float32, per row with mixed adapters too; bf16 weights give
log-probs within 0.75 nats a token (0.1 on average) of float32's on the tiny random model
(whose near-uniform logits make greedy answers flip, so only log-probs are compared); the
growing KV cache with finished rows leaving the batch gives the same answers and log-probs as
the model's own cache and sdpa attention, and (float32) as each row sampled alone; the
float32 attention of a few queries equals sdpa's under every mask transformers hands it; a
LoRA layer's cached weights follow in-place updates of its parameters; the logits of the
allowed tokens only give the full head's answers and log-probs.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

import leaguezero.diplomacy.llm.model.sampler as sampler
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.llm.client import GenerationRequest
from leaguezero.diplomacy.llm.model.cpu_speed import (
    CPU_ATTENTION,
    SHORT_QUERY,
    PackedLinear,
    cpu_attention,
    mkldnn_linear_available,
    resolve_dtype,
)
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, render_prompt
from tests.diplomacy.llm.model.adapters import two_adapter_backend

torch.set_num_threads(1)


def _backend(tiny_lm, dtype: str) -> HFBackend:
    return two_adapter_backend(tiny_lm, dtype, max_batch_size=16)


def _rows(backend: HFBackend, count: int) -> tuple[list[str], list[OrderChoices]]:
    env = DiplomacyEnv(max_years=1)
    prompts, choices = [], []
    while len(prompts) < count:
        for power in POWERS:
            legal = env.legal_orders(power)
            prompts.append(render_prompt(backend.tokenizer, build_prompt(env, power, legal)))
            choices.append(OrderChoices(legal, env.phase_type))
        env.process()
    return prompts[:count], choices[:count]


@pytest.mark.skipif(
    not hasattr(torch.ops.mkldnn, "_linear_pointwise"), reason="no oneDNN linear in this torch"
)
@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        pytest.param(
            torch.bfloat16,
            marks=pytest.mark.skipif(
                not mkldnn_linear_available(), reason="oneDNN has no bf16 path on this CPU"
            ),
        ),
    ],
)
def test_packed_linear_equals_plain_values_and_gradients(dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    plain = torch.nn.Linear(48, 80, bias=True).to(dtype).requires_grad_(False)
    packed = torch.nn.Linear(48, 80, bias=True).to(dtype).requires_grad_(False)
    packed.load_state_dict(plain.state_dict())
    packed.__class__ = PackedLinear
    for shape in [(1, 48), (7, 1, 48), (3, 5, 48)]:
        x = torch.randn(shape, generator=gen).to(dtype)
        tol = 1e-5 if dtype == torch.float32 else 1e-2  # oneDNN may block the sum differently
        assert torch.allclose(packed(x), plain(x), rtol=tol, atol=tol)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        (packed(a).float() ** 2).sum().backward()
        (plain(b).float() ** 2).sum().backward()
        # bf16 gradients: each side rounds its own sums (oneDNN blocks them by the buffers'
        # alignment, so which elements differ by a rounding step varies from run to run); the
        # error relative to the gradient's size is what a wrong backward would break.
        a_grad, b_grad = a.grad.float(), b.grad.float()
        scale = 1e-5 if dtype == torch.float32 else 2e-2
        assert float((a_grad - b_grad).norm()) <= scale * float(b_grad.norm())
    with torch.no_grad():  # a changed weight is packed again
        plain.weight.mul_(2)
        packed.weight.mul_(2)
    x = torch.randn((2, 48), generator=gen).to(dtype)
    assert torch.allclose(packed(x), plain(x), rtol=tol, atol=tol)


def test_a_cpu_without_onednn_bf16_keeps_plain_bf16_linears(monkeypatch) -> None:
    # An AVX2-only CPU: oneDNN's bf16 reorder raises there, so nothing may be packed.
    import leaguezero.diplomacy.llm.model.cpu_speed as cpu_speed

    monkeypatch.setattr(cpu_speed, "onednn_bf16_supported", lambda: False)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8)).to(torch.bfloat16).requires_grad_(False)
    assert cpu_speed.pack_linears(model) == 0
    assert type(model[0]) is torch.nn.Linear
    assert model(torch.ones(2, 8, dtype=torch.bfloat16)).shape == (2, 8)


def test_fast_lora_equals_peft_at_float32_with_mixed_adapters(tiny_lm) -> None:
    backend = _backend(tiny_lm, "float32")
    prompts, _ = _rows(backend, 5)
    adapters = ["hero", None, "other", "hero", None]
    completions = [[5, 9, 11], [7], [3, 3, 8, 2], [4, 6], [12, 1]]
    fast = backend.logprobs(prompts, completions, "hero")
    ids = torch.tensor([backend.encode(prompts[0])])
    with torch.no_grad():
        names = [backend._row_name(a) for a in adapters]
        wide = ids.expand(len(adapters), -1)
        mixed = backend.model(input_ids=wide, adapter_names=names).logits
        for module in backend.model.modules():  # peft's own forward
            if type(module).__name__ == "FastLora":
                module.__class__ = type(module).__mro__[1]
        reference = backend.model(input_ids=wide, adapter_names=names).logits
        slow = backend.logprobs(prompts, completions, "hero")
    assert torch.allclose(mixed, reference, atol=1e-5)
    for a, b in zip(fast, slow, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_bf16_log_probs_within_tolerance_of_float32(tiny_lm) -> None:
    exact, fast = _backend(tiny_lm, "float32"), _backend(tiny_lm, "bfloat16")
    assert exact.model.get_base_model().model.layers[0].mlp.up_proj.base_layer.weight.dtype == (
        torch.float32
    )
    lora = fast.adapter_parameters("hero")
    assert all(p.dtype == torch.float32 for p in lora.values())  # master weights stay fp32
    prompts, choices = _rows(exact, 7)
    greedy = exact.generate(prompts, ["hero"] * 7, 48, 0.0, 3, choices)
    tokens = [c.token_ids for c in greedy]
    allowed = [exact.allowed_tokens(ch, t) for ch, t in zip(choices, tokens, strict=True)]
    with torch.no_grad():
        a = torch.cat(exact.logprobs(prompts, tokens, "hero", allowed))
        b = torch.cat(fast.logprobs(prompts, tokens, "hero", allowed))
    gap = (a - b).abs()
    # The tiny random model is more sensitive than a trained one (SmolLM2: docs/guides/llm.md).
    assert gap.max() < 0.75 and gap.mean() < 0.1, (gap.max(), gap.mean())


def test_auto_dtype_follows_the_pin_and_the_device(monkeypatch) -> None:
    monkeypatch.setenv("LEAGUEZERO_LLM_DTYPE", "bfloat16")
    assert resolve_dtype("auto", "cpu") == "bfloat16"
    assert resolve_dtype("float32", "cpu") == "float32"
    monkeypatch.delenv("LEAGUEZERO_LLM_DTYPE")
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    monkeypatch.setenv("LEAGUEZERO_LLM_DTYPE", "int4")
    with pytest.raises(ValueError, match="LEAGUEZERO_LLM_DTYPE"):
        resolve_dtype("auto", "cpu")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_growing_cache_and_leaving_rows_give_each_rows_own_answer(tiny_lm, dtype) -> None:
    backend = _backend(tiny_lm, dtype)
    prompts, choices = _rows(backend, 9)
    adapters = ["hero", None, "other"] * 3
    # Mixed free and constrained rows, different budgets: rows finish at different steps.
    choices = [c if i % 4 else None for i, c in enumerate(choices)]
    budgets = [6 + 5 * (i % 3) for i in range(9)]

    def request(k: int) -> GenerationRequest:
        row = GenerationRequest(prompts[k], adapters[k], budgets[k], 1.0, 100 + k)
        if choices[k] is not None:
            row.extra["choices"] = choices[k]
        return row

    def run() -> list:
        return backend.generate_rows([request(k) for k in range(9)])

    base = backend.model.get_base_model()
    assert base.config._attn_implementation == CPU_ATTENTION
    backend.growing_cache, sampler.LEAVE_SHARE = True, 0.1
    fast = run()
    # The model's own cache and attention, nobody leaves.
    backend.growing_cache, sampler.LEAVE_SHARE = False, 2.0
    base.set_attn_implementation("sdpa")
    try:
        plain = run()
    finally:
        backend.growing_cache, sampler.LEAVE_SHARE = True, 0.25
        base.set_attn_implementation(CPU_ATTENTION)
    assert [c.finish_reason for c in fast] == [c.finish_reason for c in plain]
    assert len({len(c.token_ids) for c in fast}) > 1  # rows did finish at different steps
    tolerance = 1e-4 if dtype == "float32" else 0.15
    for a, b in zip(fast, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert (
            max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0)
            < tolerance
        )
    if dtype != "float32":
        return  # bf16 rounds differently at another batch shape: a near tie may flip
    for k in (0, 4, 8):  # alone: a batch of one
        (alone,) = backend.generate_rows([request(k)])
        assert alone.token_ids == fast[k].token_ids
        gaps = [abs(x - y) for x, y in zip(alone.logprobs, fast[k].logprobs, strict=True)]
        assert max(gaps, default=0) < tolerance


class _Module(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_attention_equals_sdpa_under_every_mask(dtype) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(3)
    batch, heads, kv_heads, length, dim = 3, 6, 2, 40, 16
    module = _Module()
    for q_len in (1, 4, SHORT_QUERY):
        query = torch.randn((batch, heads, q_len, dim), generator=gen).to(dtype)
        key = torch.randn((batch, kv_heads, length, dim), generator=gen).to(dtype)
        value = torch.randn((batch, kv_heads, length, dim), generator=gen).to(dtype)
        # Left padding (row 1 starts at 5, row 2 at 12) and causal within the new queries.
        allowed = torch.ones((batch, 1, q_len, length), dtype=torch.bool)
        allowed[1, ..., :5] = False
        allowed[2, ..., :12] = False
        allowed &= torch.ones((q_len, length), dtype=torch.bool).tril(length - q_len)
        additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
        masks = [allowed, additive.to(dtype)] + ([None] if q_len == 1 else [])
        for mask in masks:
            with torch.no_grad():
                want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
                # The growing cache hands float32 keys and values to a bf16 model's attention.
                got, _ = cpu_attention(module, query, key.float(), value.float(), mask, scaling=0.3)
            assert got.dtype == dtype and got.shape == want.shape == (batch, q_len, heads, dim)
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)
    # With gradients (training) and for long queries it is sdpa itself.
    query = torch.randn((1, heads, SHORT_QUERY + 1, dim), generator=gen, requires_grad=True)
    key = torch.randn((1, kv_heads, SHORT_QUERY + 1, dim), generator=gen)
    got, _ = cpu_attention(module, query, key, key, None)
    want, _ = sdpa_attention_forward(module, query, key, key, None)
    assert torch.equal(got, want) and got.requires_grad


def test_fast_lora_cached_weights_follow_in_place_updates(tiny_lm) -> None:
    backend = _backend(tiny_lm, "float32")
    prompts, _ = _rows(backend, 1)
    ids = torch.tensor([backend.encode(prompts[0])[-3:]])  # a decoding step's few rows

    def logits(peft_forward: bool = False) -> torch.Tensor:
        with torch.no_grad(), backend._one_adapter("hero"):
            if not peft_forward:
                return backend.model(input_ids=ids).logits
            fast = [m for m in backend.model.modules() if type(m).__name__ == "FastLora"]
            fast_class = type(fast[0])
            for module in fast:
                module.__class__ = fast_class.__mro__[1]
            try:
                return backend.model(input_ids=ids).logits
            finally:
                for module in fast:
                    module.__class__ = fast_class

    before = logits()
    with torch.no_grad():  # as the optimizer and a loaded version do: in place
        for name, param in backend.adapter_parameters("hero").items():
            if "lora_B" in name:
                param.mul_(-2.0)
    after = logits()
    assert not torch.allclose(before, after, atol=1e-3)
    assert torch.allclose(after, logits(peft_forward=True), atol=1e-5)


def test_fast_lora_cache_lets_deleted_adapters_go(tiny_lm) -> None:
    # A league run loads each new checkpoint under a new name and deletes what it evicts: the
    # cached casts of a deleted adapter (and its parameters, which they hold) must not stay.
    backend = _backend(tiny_lm, "float32")
    prompts, _ = _rows(backend, 1)
    ids = torch.tensor([backend.encode(prompts[0])[-3:]])
    fast = [m for m in backend.model.modules() if type(m).__name__ == "FastLora"]

    def cached_names() -> set[str]:
        return {name for m in fast for name, _ in m.__dict__.get("_low_rank_cache", {})}

    for k in range(4):
        name = f"ckpt_{k}"
        backend.add_adapter(name)
        with torch.no_grad(), backend._one_adapter(name):
            backend.model(input_ids=ids)
        assert name in cached_names()
        backend.unload_adapter(name)
    with torch.no_grad(), backend._one_adapter("hero"):
        backend.model(input_ids=ids)
    assert cached_names() == {"hero"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_allowed_tokens_logits_give_the_full_heads_answers(tiny_lm, dtype) -> None:
    backend = _backend(tiny_lm, dtype)
    prompts, choices = _rows(backend, 6)
    choices = [c if i % 3 else None for i, c in enumerate(choices)]  # free rows too
    assert type(backend.model.get_output_embeddings()).__name__ == "Float32Head"

    def run() -> list:
        return backend.generate(prompts, ["hero", None, "other"] * 2, 24, 1.0, 11, choices)

    selected = run()
    backend.select_logits = False
    try:
        full = run()
    finally:
        backend.select_logits = True
    for a, b in zip(selected, full, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        gaps = [abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)]
        assert max(gaps, default=0.0) < 1e-4


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prefix_cache_gives_the_answers_and_log_probs_of_a_full_prefill(tiny_lm, dtype) -> None:
    backend = _backend(tiny_lm, dtype)
    prompts, choices = _rows(backend, 9)
    adapters = ["hero", None, "other"] * 3
    choices = [c if i % 4 else None for i, c in enumerate(choices)]

    def run(rows: range) -> list:
        return backend.generate_rows(
            [
                GenerationRequest(prompts[k], adapters[k], 12, 1.0, 300 + k, extra=(
                    {"choices": choices[k]} if choices[k] is not None else {}
                ))
                for k in rows
            ]
        )  # fmt: skip

    backend.prefix_cache = None
    plain = run(range(9))
    # The tiny model has no chat template: its prompts share only "Diplomacy, no press.
    # Phase" (SmolLM2's system turn is ~80 tokens), so the cache takes shorter prefixes here.
    cache = backend.prefix_cache = sampler.PrefixCache(min_tokens=4)
    cached = run(range(9))  # learns the shared part from this batch's prompts, then uses it
    assert cache.boundary is not None and cache.boundary >= cache.min_tokens
    assert cache.stats.misses == 3 and cache.stats.tokens_saved > 0  # one per adapter
    again = run(range(9))
    assert cache.stats.hits == 3 and cache.stats.misses == 3
    tolerance = 1e-5 if dtype == "float32" else 0.15
    for got in (cached, again):
        for a, b in zip(got, plain, strict=True):
            gaps = [abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)]
            assert max(gaps, default=0.0) < tolerance
            if dtype == "float32":  # bf16 rounds by shape: a near tie may flip
                assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
    # A batch of one row uses the prefix too; an in-place update of an adapter misses.
    (alone,) = run(range(2, 3))
    assert cache.stats.hits == 4
    with torch.no_grad():
        next(iter(backend.adapter_parameters("other").values())).add_(0.5)
    run(range(2, 3))
    assert cache.stats.misses == 4
    if dtype == "float32":
        assert alone.token_ids == plain[2].token_ids
