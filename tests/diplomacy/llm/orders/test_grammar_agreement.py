"""vLLM's grammar engine (xgrammar) and the trainer's mask replay allow the same tokens.

vLLM samples a constrained answer under xgrammar's token mask of the order expression; the
trainer scores it under :func:`.constrained.replay_allowed`'s mask. If the two differ the
trainer scores a policy that did not sample (and a token xgrammar allowed but the expression
forbids breaks the record). Here the expressions of every seat-phase of real games (bots of
three kinds, several years: movement with fleets and convoy options, retreats, adjustments)
are compiled by xgrammar's regex grammar over a byte-level tokenizer built on the spot
(``xgrammar.TokenizerInfo.from_huggingface``, as vLLM does); completions are walked under
*xgrammar's* masks (see :func:`compare`), and at every step its set is compared with the
trainer's.

xgrammar before 0.2.1 (0.1.25, 0.1.27 and 0.1.29 are the pins of vLLM 0.11.0, 0.12/0.13 and
0.14) accepts lines mixing two options (``F EAS C A CON - SMY`` for a convoy of A SYR beside
supports of A CON and A SYR) and fails here (0.1.29: 20 and 13 differing steps); 0.2.1 and 0.2.8
agree at every step (~277,000 and ~163,000). Walking every option of every line matters: tokens
drawn from xgrammar's mask alone rarely enter the convoy lines where the masks differ. Skipped
where xgrammar is not installed (not in the ``dev`` extra: its wheel requires ``triton``);
``pip install --no-deps xgrammar==0.2.8 apache-tvm-ffi`` is enough to run it on a CPU.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("transformers")
if os.environ.get("LEAGUEZERO_REQUIRE_XGRAMMAR"):  # .ci/run installs it: a skip would hide
    import xgrammar as xgr
else:
    xgr = pytest.importorskip("xgrammar")

from leaguezero.diplomacy.llm.orders.constrained import ConstraintCompiler, OrderChoices
from tests.diplomacy.mask_walks import compare_walks
from tests.diplomacy.mask_walks import describe as describe_walks
from tests.diplomacy.tiny_lm import (
    build_tokenizer,
    game_choices,
    line_tokenizer,
    record_corpus,
)


def xgrammar_version() -> str:
    from importlib.metadata import version

    return version("xgrammar")


def compare(tokenizer, records, rng: random.Random) -> tuple[int, list]:
    """Steps compared and the differing steps ``(record, step, xgrammar only, trainer only)``
    (:func:`~tests.diplomacy.mask_walks.compare_walks`'s two walks per record)."""
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    grammars = xgr.GrammarCompiler(info)
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)

    class Matcher:
        def __init__(self, compiled) -> None:
            self.matcher = xgr.GrammarMatcher(compiled)

        def mask(self) -> set[int]:
            self.matcher.fill_next_token_bitmask(bitmask)
            bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")
            return set(np.flatnonzero(bits[: info.vocab_size]).tolist())

        def done(self, tokens) -> bool:
            return self.matcher.is_terminated()

        def step(self, token: int) -> bool:
            assert self.matcher.accept_token(token)
            return True

        advance = step

        def rollback(self, tokens) -> None:
            self.matcher.rollback(len(tokens))

    compiled: dict[str, object] = {}

    def start(choices, rollback: bool) -> Matcher:
        regex = choices.regex()
        if regex not in compiled:
            compiled.clear()  # one record at a time
            compiled[regex] = grammars.compile_regex(regex)
        return Matcher(compiled[regex])

    return compare_walks(compiler, tokenizer, records, rng, start)


def describe(tokenizer, records, differences) -> str:
    return describe_walks(f"xgrammar {xgrammar_version()}", tokenizer, records, differences)


@pytest.fixture(scope="module")
def records() -> list[OrderChoices]:
    found = game_choices(4, 7, seed=14)
    assert {c.phase_type for c in found} >= {"M", "A"}
    assert any(" C " in o for c in found for opts in c.legal.values() for o in opts)
    return found


def test_xgrammar_refuses_a_line_that_mixes_two_options() -> None:
    tokenizer = build_tokenizer(512)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    options = ["F EAS C A SYR - SMY", "F EAS S A CON - SMY", "F EAS S A SYR - SMY"]
    choices = OrderChoices({"EAS": options}, "M")
    compiled = xgr.GrammarCompiler(info).compile_regex(choices.regex())
    assert not choices.admits("1) F EAS C A CON - SMY\nEND", finished=True)
    bogus = xgr.GrammarMatcher(compiled).accept_string("1) F EAS C A CON - SMY\nEND")
    assert not bogus, f"xgrammar {xgrammar_version()} accepts an order outside the expression"


@pytest.mark.parametrize("kind", ["words", "lines"])
def test_xgrammar_masks_equal_the_trainers_replay_on_real_games(records, kind) -> None:
    if kind == "words":
        tokenizer = build_tokenizer(600, record_corpus(records))
    else:
        tokenizer = line_tokenizer(record_corpus(records), 4000)
    steps, differences = compare(tokenizer, records, random.Random(len(kind)))
    print(
        f"xgrammar {xgrammar_version()}, vocab {len(tokenizer)}: {steps} steps compared, "
        f"{len(differences)} differences, {len(records)} seat-phases"
    )
    assert steps > 10_000
    assert not differences, describe(tokenizer, records, differences)
