"""A packed prefill (the prompts laid end to end, no padding; attention row by row) gives
the padded batch's answers and log-probs (issue 51).

Shows: in float32 the same tokens, finish reasons and log-probs within 1e-5 as the left-padded
batch, rows of different lengths and adapters (three adapters, so three packed passes), with
and without the cached prompt prefix; the packed attention ran in every layer of every pass;
a model whose layers do not attend through ``cpu_attention`` is refused, not sampled wrong.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.llm.client import GenerationRequest
from leaguezero.diplomacy.llm.model import packed_prefill
from leaguezero.diplomacy.llm.model.cpu_speed import CPU_ATTENTION
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.model.prefix_cache import PrefixCache
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, render_prompt
from tests.diplomacy.llm.model.adapters import two_adapter_backend

torch.set_num_threads(1)


def _backend(tiny_lm) -> HFBackend:
    return two_adapter_backend(tiny_lm, "float32")


def _requests(backend: HFBackend, count: int = 9) -> list[GenerationRequest]:
    env = DiplomacyEnv(max_years=1)
    rows: list[GenerationRequest] = []
    adapters = ["hero", None, "other"]
    while len(rows) < count:
        for power in POWERS[: max(1, count - len(rows))]:
            k = len(rows)
            legal = env.legal_orders(power)
            prompt = render_prompt(backend.tokenizer, build_prompt(env, power, legal))
            row = GenerationRequest(prompt, adapters[k % 3], 6 + 4 * (k % 3), 1.0, 500 + k)
            if k % 4:  # free and constrained rows
                row.extra["choices"] = OrderChoices(legal, env.phase_type)
            rows.append(row)
        env.process()
    return rows


@pytest.mark.parametrize("prefix", [False, True])
def test_packed_prefill_gives_the_padded_batchs_answers(tiny_lm, prefix, monkeypatch) -> None:
    backend = _backend(tiny_lm)
    assert backend.model.get_base_model().config._attn_implementation == CPU_ATTENTION
    rows = _requests(backend)
    lengths = {len(backend.encode(r.prompt)) for r in rows}
    assert len(lengths) > 3  # the padded batch does pad

    def run(packed: bool) -> list:
        backend.packed_prefill = packed
        # A fresh cache each run; the tiny model's prompts share a short prefix only.
        backend.prefix_cache = PrefixCache(min_tokens=4) if prefix else None
        backend.generate_rows(rows[:2])  # the cache learns the prefix before the batch
        saved.append(backend.prefix_cache.stats.tokens_saved if prefix else 0)
        return backend.generate_rows(rows)

    saved: list[int] = []

    calls: list[int] = []
    original = packed_prefill.attention

    def spy(plan, layer_idx, query, scaling):
        calls.append(layer_idx)
        return original(plan, layer_idx, query, scaling)

    monkeypatch.setattr(packed_prefill, "attention", spy)
    padded = run(False)
    assert not calls
    packed = run(True)
    layers = backend.model.get_base_model().config.num_hidden_layers
    assert len(calls) == layers * (3 + 2)  # three adapters in the batch, two in the warm-up
    if prefix:  # the batch's rows started from the cached prefix
        assert backend.prefix_cache is not None
        assert backend.prefix_cache.stats.tokens_saved >= saved[-1] + len(rows) * 4
    for a, b in zip(packed, padded, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        gaps = [abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)]
        assert max(gaps, default=0.0) < 1e-5


def test_a_model_without_leaguezeros_attention_is_refused(tiny_lm) -> None:
    backend = _backend(tiny_lm)
    base = backend.model.get_base_model()
    base.set_attn_implementation("sdpa")
    try:
        with pytest.raises(RuntimeError, match="cpu_attention"):
            backend.generate_rows(_requests(backend, 2))
    finally:
        base.set_attn_implementation(CPU_ATTENTION)
