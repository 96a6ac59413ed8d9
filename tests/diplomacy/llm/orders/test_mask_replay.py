"""Mask replay by the token trie gives outlines-core's allowed sets, step for step.

``replay_allowed`` (the trainer's: byte automaton + token trie, :mod:`.mask_replay`) against
``replay_allowed_index`` (an ``outlines_core.Index`` over the whole vocabulary, what the sampler
walks) on completions sampled uniformly among the allowed tokens (odd tokenisations included)
for every seat-phase of random games (movement, retreats, adjustments; fleets and convoys), at
a small byte-level vocabulary and at the tokenizer ``llm pretrain`` builds (special chat tokens
left out); and on made-up choices whose orders hold regex metacharacters and multi-byte text.
A token outside the mask is refused at its position, as before.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("outlines_core")
pytest.importorskip("transformers")

from leaguezero.diplomacy.llm.orders.constrained import (
    ConstraintCompiler,
    OrderChoices,
    replay_allowed,
    replay_allowed_index,
)
from tests.diplomacy.tiny_lm import build_tokenizer, diplomacy_corpus, game_choices


def sample(compiler: ConstraintCompiler, choices: OrderChoices, rng: random.Random) -> list[int]:
    machine = compiler.machine(choices.regex())
    tokens = []
    while not machine.done:
        token = rng.choice(machine.allowed())
        machine.step(token)
        tokens.append(token)
    return tokens


def check_equal(compiler, records, rng) -> tuple[int, set[int]]:
    """Steps compared, and every id some step allowed."""
    steps, seen = 0, set()
    for choices in records:
        tokens = sample(compiler, choices, rng)
        reference = replay_allowed_index(compiler, choices, tokens)
        fast = replay_allowed(compiler, choices, tokens)
        assert len(fast) == len(reference) == len(tokens)
        for a, b in zip(reference, fast, strict=True):
            assert sorted(a) == sorted(b)
            seen.update(b)
        steps += len(tokens)
    return steps, seen


@pytest.fixture(scope="module")
def records() -> list[OrderChoices]:
    found = game_choices(3, 5, seed=3)
    assert {c.phase_type for c in found} == {"M", "R", "A"}
    assert any(" C " in o for c in found for opts in c.legal.values() for o in opts)  # convoys
    return found


def test_trie_replay_equals_outlines_core_on_real_games(records) -> None:
    tokenizer = build_tokenizer(600)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    assert check_equal(compiler, records, random.Random(0))[0] > 5000


def test_trie_replay_equals_outlines_core_at_the_pretrain_tokenizer(records) -> None:
    from leaguezero.diplomacy.llm.base.pretrain import build_tokenizer as pretrain_tokenizer

    tokenizer = pretrain_tokenizer(diplomacy_corpus(), vocab_size=900)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    assert len(special) == 3  # EOS and the two chat markers
    rng = random.Random(1)
    steps, seen = check_equal(compiler, rng.sample(records, 60), rng)
    assert steps > 1000 and seen & special == {compiler.eos_id}


def test_trie_replay_on_metacharacters_and_multibyte_orders() -> None:
    corpus = ["A (x)|y.* é ü → ENDE\n", "1) 2) END"] * 3
    tokenizer = build_tokenizer(320, corpus)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    rng = random.Random(2)
    pieces = ["A", "B", " ", "(", ")", "|", ".", "*", "+", "?", "é", "ü", "→", "END", "EN", "\\"]
    made_up = []
    for _ in range(40):
        legal = {
            f"L{k}": list({"".join(rng.choices(pieces, k=rng.randint(1, 6))) for _ in range(4)})
            for k in range(rng.randint(1, 4))
        }
        kind = rng.choice("MA")
        made_up.append(OrderChoices(legal, kind, rng.randint(0, 3) if kind == "A" else None))
    assert check_equal(compiler, made_up, rng)[0] > 200


def test_a_token_outside_the_mask_is_refused_at_its_position(records) -> None:
    tokenizer = build_tokenizer(600)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    choices = records[0]
    tokens = sample(compiler, choices, random.Random(4))
    with pytest.raises(ValueError, match="at position 0 breaks its constraint"):
        replay_allowed(compiler, choices, [compiler.eos_id])
    with pytest.raises(ValueError, match=f"at position {len(tokens)} breaks"):
        replay_allowed(compiler, choices, [*tokens, tokens[0]])  # anything after EOS
    with pytest.raises(ValueError, match="token 99999 at position 1 breaks"):
        replay_allowed(compiler, choices, [tokens[0], 99999])  # not in the vocabulary


def test_the_trie_machine_walks_as_the_index_machine(records) -> None:
    """What the in-process sampler now walks for an order list (``order_machine``): the same
    allowed set at every step as outlines-core's index, the same end, the same refusals."""
    tokenizer = build_tokenizer(600)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    rng = random.Random(2)
    steps = 0
    for choices in rng.sample(records, 80):
        index, trie = compiler.machine(choices.regex()), compiler.order_machine(choices)
        while not index.done:
            allowed = index.allowed()
            assert sorted(trie.allowed()) == sorted(allowed)
            refused = next(t for t in range(len(tokenizer)) if t not in allowed)
            with pytest.raises(ValueError, match="not a legal continuation"):
                trie.step(refused)
            token = rng.choice(allowed)
            index.step(token)
            trie.step(token)
            assert trie.done == index.done
            steps += 1
        assert trie.allowed() == [] and index.allowed() == []
    assert steps > 1000
