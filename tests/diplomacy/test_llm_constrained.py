"""Constrained decoding (`llm.mode: constrained`): every order legal, masked log-probs.

A tiny random LM with a BPE tokenizer trained here on prompts and answers: sampled answers
only hold legal orders (free generation from the same model writes junk), each location is
ordered once in listing order, adjustments use a site once; the sampler's log-probs are the
masked ones the trainer recomputes (forced tokens 0), gradients reach the hero adapter; the
constraint travels to `llm serve` and back, and a server that ignores it is refused.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.constrained import AnswerMachine, OrderChoices, replay_allowed
from leaguezero.diplomacy.llm.decoding import CONSTRAINED
from leaguezero.diplomacy.llm.hero import LLMHero
from leaguezero.diplomacy.llm.hf_backend import HFBackend
from leaguezero.diplomacy.llm.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.pretrain import build_model, build_tokenizer, collect_examples
from leaguezero.diplomacy.llm.prompt import build_prompt, extract_orders, render_prompt
from leaguezero.diplomacy.llm.server import LLMServer
from leaguezero.diplomacy.train.grpo import ActionRecord

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    examples = collect_examples(2, max_years=1, seed=5)
    tokenizer = build_tokenizer([e.prompt + e.answer for e in examples], vocab_size=400)
    torch.manual_seed(0)
    model = build_model(tokenizer, hidden=32, layers=1, heads=2)
    folder = tmp_path_factory.mktemp("tiny") / "lm"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def backend(tiny) -> HFBackend:
    return HFBackend.from_pretrained(tiny)


def _sample(machine: AnswerMachine, rng: torch.Generator) -> list[int]:
    tokens = []
    while not machine.done:
        allowed = machine.allowed()
        token = allowed[int(torch.randint(len(allowed), (1,), generator=rng))]
        machine.step(token)
        tokens.append(token)
    return tokens


def test_machine_walks_only_legal_lines_in_listing_order(backend) -> None:
    tok = backend.tokenizer
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("RUSSIA")
    rng = torch.Generator().manual_seed(1)
    for _ in range(5):
        machine = AnswerMachine(tok, OrderChoices(legal, "M"), backend.eos_id)
        tokens = _sample(machine, rng)
        assert tokens[-1] == backend.eos_id
        text = tok.decode(tokens[:-1])
        lines = text.splitlines()
        assert lines[-1] == "END" and len(lines) == len(legal) + 1
        for k, (line, loc) in enumerate(zip(lines, sorted(legal), strict=False), 1):
            number, order = line.split(") ", 1)
            assert int(number) == k and order in legal[loc]
        assert machine.orders == [line.split(") ", 1)[1] for line in lines[:-1]]
        parsed = extract_orders(text, legal, "M")
        assert parsed.invalid == 0 and parsed.missing == 0
        # Replaying gives the allowed set the sampler saw; a foreign token is refused.
        assert len(replay_allowed(tok, OrderChoices(legal, "M"), tokens, backend.eos_id)) == len(
            tokens
        )
    with pytest.raises(ValueError, match="breaks its constraint"):
        replay_allowed(tok, OrderChoices(legal, "M"), [backend.eos_id], backend.eos_id)


def test_adjustments_use_each_site_once_and_waive_keeps_it_open(backend) -> None:
    builds = {"PAR": ["A PAR B", "F PAR B", "WAIVE"], "MAR": ["A MAR B", "WAIVE"]}
    rng = torch.Generator().manual_seed(2)
    seen_waive = False
    for _ in range(30):
        machine = AnswerMachine(backend.tokenizer, OrderChoices(builds, "A", 2), backend.eos_id)
        _sample(machine, rng)
        assert len(machine.orders) == 2
        sites = [o.split()[1] for o in machine.orders if o != "WAIVE"]
        assert len(sites) == len(set(sites))
        seen_waive |= "WAIVE" in machine.orders
    assert seen_waive
    three = AnswerMachine(backend.tokenizer, OrderChoices(builds, "A", 3), backend.eos_id)
    _sample(three, rng)
    assert len(three.orders) == 2  # more owed than sites: one line per site


def test_choices_round_trip_and_bad_values_fail_in_one_line() -> None:
    choices = OrderChoices({"PAR": ["A PAR H"]}, "A", 1)
    assert OrderChoices.from_json(choices.to_json()) == OrderChoices({"PAR": ["A PAR H"]}, "A", 1)
    bad_values = [
        [],
        {"legal": {"PAR": [1]}},
        {"legal": {}, "phase_type": "X"},
        {"legal": {}, "owed": -1},
    ]
    for bad in bad_values:
        with pytest.raises(ValueError, match="leaguezero_choices"):
            OrderChoices.from_json(bad)


def test_constrained_games_give_only_legal_orders_and_trainable_masked_log_probs(backend):
    cfg = DiplomacyConfig(max_years=1)
    hero = LLMHero(backend, max_new_tokens=160, decoding=CONSTRAINED)
    seating = {p: ("hero" if p == "FRANCE" else "base_model") for p in POWERS}
    table = hero.table(seating, seed=3, hero_name="hero")
    run_rollout(cfg, 0, 0, table.seating, "FRANCE", resolver=table.resolver)
    for stats in table.stats.values():
        assert stats.completions > 0 and stats.invalid == 0 and stats.missing == 0
    records: list[ActionRecord] = [r for r in table.records if r.power == "FRANCE"]
    assert records and all(r.payload.choices is not None for r in records)
    new = hero.log_prob(records)
    old = torch.tensor([r.old_log_prob for r in records])
    assert torch.allclose(new.detach(), old.float(), atol=1e-3)
    # Forced tokens carry probability 1: the per-token log-probs are 0 there.
    payload = records[0].payload
    allowed = backend.allowed_tokens(payload.choices, payload.token_ids)
    per_token = backend.logprobs([payload.prompt], [payload.token_ids], None, [allowed])[0]
    forced = torch.tensor([len(a) == 1 for a in allowed])
    assert forced.any() and (~forced).any()
    assert torch.all(per_token[forced] == 0) and torch.all(per_token[~forced] < 0)
    # The masked log-prob is differentiable in the hero adapter.
    new.sum().backward()
    grads = [p.grad for p in hero.trainable_parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    # Free generation from the same (random) model writes illegal orders.
    free = LLMHero(backend, max_new_tokens=40)
    table = free.table(seating, seed=3, hero_name="hero")
    env = DiplomacyEnv(max_years=1)
    table.orders(env, "FRANCE")
    assert sum(s.invalid + s.missing for s in table.stats.values()) > 0


def test_forced_runs_jump_forward_in_one_pass_beside_free_rows(backend) -> None:
    # Rows of one batch: three constrained (different lengths, so their forced runs end at
    # different places) and one free. Forced runs are fed in one forward pass each, so there
    # are far fewer passes than tokens; every row's log-probs still match a teacher-forced
    # pass over its whole completion (positions and masks of the jumped runs are right).
    env = DiplomacyEnv(max_years=1)
    powers = ["FRANCE", "RUSSIA", "ITALY", "TURKEY"]
    prompts, choices = [], []
    for power in powers:
        legal = env.legal_orders(power)
        prompts.append(render_prompt(backend.tokenizer, build_prompt(env, power, legal)))
        choices.append(OrderChoices(legal, env.phase_type, None))
    calls = []
    forward = backend._forward
    backend._forward = lambda **kw: calls.append(kw["input_ids"].shape) or forward(**kw)
    try:
        alone = backend.generate(prompts[:3], [None] * 3, 60, 1.0, 17, choices[:3])
    finally:
        backend._forward = forward
    assert all(c.finish_reason == "stop" for c in alone)
    longest = max(len(c.token_ids) for c in alone)
    assert len(calls) - 1 < longest / 2  # one pass per choice point, not per token
    assert any(shape[1] > 1 for shape in calls[1:])  # forced runs went in together
    backend.jump_forward = False  # the reference: one pass per token, the same answers
    stepwise = backend.generate(prompts[:3], [None] * 3, 60, 1.0, 17, choices[:3])
    backend.jump_forward = True
    assert [c.token_ids for c in stepwise] == [c.token_ids for c in alone]
    for a, b in zip(stepwise, alone, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    choices[-1] = None  # TURKEY writes freely beside them
    out = backend.generate(prompts, [None] * 4, 40, 1.0, 17, choices)
    for prompt, completion, choice in zip(prompts, out, choices, strict=True):
        allowed = backend.allowed_tokens(choice, completion.token_ids)
        again = backend.logprobs([prompt], [completion.token_ids], None, [allowed])[0]
        assert torch.allclose(again, torch.tensor(completion.logprobs), atol=1e-3)


def test_rows_of_one_adapter_sample_as_they_do_in_a_mixed_batch(backend) -> None:
    # A batch whose rows all use one adapter runs peft's plain path (faster); the row must
    # come out the same as beside a row of another adapter (peft's per-row path).
    backend.add_adapter("other")
    with torch.no_grad():
        for param in backend.adapter_parameters("other").values():
            param.add_(0.2 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("GERMANY")
    prompt = render_prompt(backend.tokenizer, build_prompt(env, "GERMANY", legal))
    choice = OrderChoices(legal, env.phase_type, None)
    alone = backend.generate([prompt, prompt], ["other", "other"], 60, 1.0, 5, [choice, choice])
    mixed = backend.generate([prompt, prompt], ["other", None], 60, 1.0, 5, [choice, choice])
    base = backend.generate([prompt, prompt], [None, None], 60, 1.0, 5, [choice, choice])
    assert alone[0].token_ids == mixed[0].token_ids
    assert mixed[1].token_ids == base[1].token_ids
    assert alone[0].logprobs == pytest.approx(mixed[0].logprobs, abs=1e-4)
    assert mixed[1].logprobs == pytest.approx(base[1].logprobs, abs=1e-4)
    assert alone[0].logprobs != pytest.approx(base[0].logprobs, abs=1e-3)  # "other" is not the base


def test_the_constraint_travels_through_llm_serve_and_an_ignoring_server_is_refused(
    backend, monkeypatch
) -> None:
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("ITALY")
    prompt = render_prompt(backend.tokenizer, build_prompt(env, "ITALY", legal))
    server = LLMServer(backend, host="127.0.0.1", port=0).start()
    try:
        with OpenAIClient(server.url) as client:
            choices = [OrderChoices(legal, "M")]
            (completion,) = client.generate([prompt], [None], 160, 1.0, 7, choices)
            parsed = extract_orders(completion.text, legal, "M")
            assert parsed.invalid == 0 and parsed.missing == 0
            allowed = backend.allowed_tokens(choices[0], completion.token_ids)
            recomputed = backend.logprobs([prompt], [completion.token_ids], None, [allowed])[0]
            assert abs(float(recomputed.sum()) - completion.logprob_sum) < 1e-3
            real = client._request

            def ignoring(method, path, body=None):
                body = {k: v for k, v in (body or {}).items() if k != "leaguezero_choices"}
                return real(method, path, body)

            monkeypatch.setattr(client, "_request", ignoring)
            with pytest.raises(LLMError, match="ignored leaguezero_choices"):
                client.generate([prompt], [None], 16, 1.0, 7, choices)
    finally:
        server.shutdown()


def test_bf16_autocast_samples_and_trains_with_float32_adapters(tiny) -> None:
    fast = HFBackend.from_pretrained(tiny, bf16_autocast=True)
    exact = HFBackend.from_pretrained(tiny)
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("TURKEY")
    prompt = render_prompt(fast.tokenizer, build_prompt(env, "TURKEY", legal))
    choices = OrderChoices(legal, "M")
    (completion,) = fast.generate([prompt], [None], 160, 1.0, 11, [choices])
    assert extract_orders(completion.text, legal, "M").invalid == 0
    allowed = fast.allowed_tokens(choices, completion.token_ids)
    in_bf16 = fast.logprobs([prompt], [completion.token_ids], None, [allowed])[0]
    in_fp32 = exact.logprobs([prompt], [completion.token_ids], None, [allowed])[0]
    assert abs(float(in_bf16.sum()) - completion.logprob_sum) < 0.05
    assert abs(float(in_bf16.sum()) - float(in_fp32.sum())) < 0.25  # bf16 rounding, not a bug
    hero = LLMHero(fast, decoding=CONSTRAINED)
    assert all(p.dtype == torch.float32 for p in hero.trainable_parameters())
