"""Constrained decoding (`llm.mode: constrained`): every order legal, masked log-probs.

A tiny random LM with a BPE tokenizer trained here on prompts and answers: sampled answers
only hold legal orders (free generation from the same model writes junk), each location is
ordered once in listing order, in any tokenisation of its line; adjustments write the owed
lines from the sites' options; the sampler's log-probs are the masked ones the trainer
recomputes (forced tokens 0), gradients reach the hero adapter; the constraint travels to
`llm serve` as vLLM's `structured_outputs` and back, and an answer of a server that ignores it
is flagged (a failed seat, tests/diplomacy/llm/orders/test_grammar_violations.py).
"""

from __future__ import annotations

import os

import httpx
import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.llm.base.pretrain import build_model, build_tokenizer, collect_examples
from leaguezero.diplomacy.llm.hero import LLMHero
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.constrained import (
    OrderChoices,
    RegexMachine,
    choice_regex,
    regex_literal,
    replay_allowed,
    token_bytes,
)
from leaguezero.diplomacy.llm.orders.decoding import CONSTRAINED
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, extract_orders, render_prompt
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.serve.server import LLMServer

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


def _sample(machine: RegexMachine, rng: torch.Generator) -> list[int]:
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
    choices = OrderChoices(legal, "M")
    rng = torch.Generator().manual_seed(1)
    canonical = 0
    for _ in range(8):
        machine = backend.constraints.machine(choices.regex())
        tokens = _sample(machine, rng)  # uniform over allowed tokens: odd tokenisations too
        assert tokens[-1] == backend.eos_id
        text = tok.decode(tokens[:-1])
        lines = text.splitlines()
        assert lines[-1] == "END" and len(lines) == len(legal) + 1
        for k, (line, loc) in enumerate(zip(lines, sorted(legal), strict=False), 1):
            number, order = line.split(") ", 1)
            assert int(number) == k and order in legal[loc]
        parsed = extract_orders(text, legal, "M")
        assert parsed.invalid == 0 and parsed.missing == 0
        assert choices.admits(text, finished=True)
        canonical += tok(text, add_special_tokens=False)["input_ids"] == tokens[:-1]
        # Replaying gives the allowed set the sampler saw; a foreign token is refused.
        assert len(replay_allowed(backend.constraints, choices, tokens)) == len(tokens)
    assert canonical < 8  # the mask admits every tokenisation of a line, as vLLM's does
    with pytest.raises(ValueError, match="breaks its constraint"):
        replay_allowed(backend.constraints, choices, [backend.eos_id])


def test_adjustments_write_the_owed_lines_from_the_sites_options(backend) -> None:
    builds = {"PAR": ["A PAR B", "F PAR B", "WAIVE"], "MAR": ["A MAR B", "WAIVE"]}
    rng = torch.Generator().manual_seed(2)
    seen_waive = seen_twice = False
    for _ in range(40):
        machine = backend.constraints.machine(OrderChoices(builds, "A", 2).regex())
        text = backend.tokenizer.decode(_sample(machine, rng)[:-1])
        orders = [line.split(") ", 1)[1] for line in text.splitlines()[:-1]]
        assert len(orders) == 2 and all(
            o in {"A PAR B", "F PAR B", "A MAR B", "WAIVE"} for o in orders
        )
        parsed = extract_orders(text, builds, "A", 2)
        sites = [o.split()[1] for o in orders if o != "WAIVE"]
        # A site named twice is legal line by line; the parser keeps the first, counts the other.
        assert parsed.invalid == len(sites) - len(set(sites))
        seen_twice |= len(sites) != len(set(sites))
        seen_waive |= "WAIVE" in orders
    assert seen_waive and seen_twice
    three = backend.constraints.machine(OrderChoices(builds, "A", 3).regex())
    text = backend.tokenizer.decode(_sample(three, rng)[:-1])
    assert len(text.splitlines()) == 3  # more owed than sites: one line per site, then END
    none_owed = backend.constraints.machine(OrderChoices(builds, "A", 0).regex())
    assert backend.tokenizer.decode(_sample(none_owed, rng)[:-1]) == "END"


def test_regexes_escape_orders_and_bad_ones_fail_in_one_line(backend) -> None:
    assert regex_literal("F STP/SC - BOT (x)|y.\n") == r"F STP/SC - BOT \(x\)\|y\.\n"
    assert choice_regex(["A PAR H", "A+B"]) == r"(A PAR H|A\+B)"
    with pytest.raises(ValueError, match="at least one option"):
        choice_regex([])
    with pytest.raises(ValueError, match="cannot constrain"):
        backend.constraints.index("(A")  # not a regular expression
    # Byte-level tokens map back to their bytes: a space is Ġ in the vocabulary, b" " here.
    vocab = token_bytes(backend.tokenizer)
    assert b" " in vocab and b"\n" in vocab
    assert backend.eos_id not in {i for ids in vocab.values() for i in ids}  # special: left out
    choices = OrderChoices({"PAR": ["A PAR H"]}, "M")
    assert choices.admits("1) A PAR H\nEND", finished=True)
    assert choices.admits("1) A PA", finished=False)
    assert not choices.admits("1) A PAR - BUR\nEND", finished=True)
    assert not choices.admits("1) F PAR H\nEN", finished=False)


def test_constrained_games_give_only_legal_orders_and_trainable_masked_log_probs(backend):
    cfg = DiplomacyConfig(max_years=1)
    hero = LLMHero(backend, max_new_tokens=160, decoding=CONSTRAINED)
    seating = parse_seating({p: ("hero" if p == "FRANCE" else "base_model") for p in POWERS})
    table = hero.table(seating, seed=3)
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
    table = free.table(seating, seed=3)
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
    # One pass per choice point, not per token (fewer forced runs than with one tokenisation
    # per line: the mask admits any tokenisation, so a line's tail is often a real choice).
    assert len(calls) - 1 < longest * 2 / 3
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


def test_the_constraint_travels_through_llm_serve_and_an_ignoring_server_is_flagged(
    backend, monkeypatch, capsys
) -> None:
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("ITALY")
    prompt = render_prompt(backend.tokenizer, build_prompt(env, "ITALY", legal))
    server = LLMServer(backend, host="127.0.0.1", port=0).start()
    try:
        with OpenAIClient(server.url) as client:
            choices = [OrderChoices(legal, "M")]
            sent = []
            real = client._request

            def spy(method, path, body=None):
                sent.append(body)
                return real(method, path, body)

            monkeypatch.setattr(client, "_request", spy)
            (completion,) = client.generate([prompt], [None], 160, 1.0, 7, choices)
            assert sent[-1]["structured_outputs"] == {"regex": choices[0].regex()}  # vLLM's field
            parsed = extract_orders(completion.text, legal, "M")
            assert parsed.invalid == 0 and parsed.missing == 0
            allowed = backend.allowed_tokens(choices[0], completion.token_ids)
            recomputed = backend.logprobs([prompt], [completion.token_ids], None, [allowed])[0]
            assert abs(float(recomputed.sum()) - completion.logprob_sum) < 1e-3

            def ignoring(method, path, body=None):
                body = {k: v for k, v in (body or {}).items() if k != "structured_outputs"}
                return real(method, path, body)

            monkeypatch.setattr(client, "_request", ignoring)
            capsys.readouterr()
            (ignored,) = client.generate([prompt], [None], 160, 1.0, 7, choices)
            # A failed seat (counted, no record), not a crash; the cause said on stderr.
            assert ignored.grammar_violation
            assert "ignores structured_outputs" in capsys.readouterr().err
        # vLLM's choice list, and what this server refuses in one line.
        url = server.url + "/v1/completions"
        base = {"model": backend_name(server), "prompt": prompt, "max_tokens": 12, "seed": 1}
        reply = httpx.post(url, json={**base, "structured_outputs": {"choice": ["A", "B C"]}})
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] in ("A", "B C")
        for bad, message in [
            ({"json": {"type": "object"}}, "json not supported"),
            ({"regex": "A", "choice": ["B"]}, "exactly one of"),
            ({"choice": []}, "list of non-empty strings"),
            ({"regex": "(A"}, "cannot constrain"),
            ("A", "must be an object"),
        ]:
            reply = httpx.post(url, json={**base, "structured_outputs": bad})
            assert reply.status_code == 400 and message in reply.json()["error"]["message"]
    finally:
        server.shutdown()


def backend_name(server: LLMServer) -> str:
    return httpx.get(server.url + "/v1/models").json()["data"][0]["id"]


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
