"""Constrained decoding: the model writes its answer token by token, but only legal orders.

In ``llm.mode: constrained`` a seat's answer is constrained by a **regular expression** — the
same constraint whichever process samples: vLLM's OpenAI-compatible server takes it as
``structured_outputs: {"regex": ...}`` (vLLM >= 0.11.0), ``leaguezero llm serve`` takes the same
field, and the in-process backend applies it directly. The answer keeps the free-generation
layout (:func:`~leaguezero.diplomacy.llm.base.corpus.answer_text`): line *k* is
``"{k}) {order}\\n"`` for one of location *k*'s legal orders (locations in the prompt's order), then
``END`` and end-of-sequence.

Token masks come from the regular expression and the model's vocabulary by ``outlines-core``
(an :class:`outlines_core.Index`: a token is allowed when its bytes keep the text a prefix of a
string the expression matches, as vLLM's grammar backends decide), so a line may be written in
any tokenisation the vocabulary allows, and end-of-sequence only once ``END`` is written. The
policy's log-probability of a token is ``log_softmax`` over the *allowed* tokens (raw logits,
temperature 1): the distribution the sampler really drew from, which vLLM also reports (it
applies the grammar mask to the logits before its log-probs); a forced token has log-prob 0.
:func:`replay_allowed` walks a completion's tokens again to give the allowed set at each
position, with which the trainer recomputes the same masked log-probs; it gives the sets an
``Index`` gives (:func:`replay_allowed_index`, the reference) without building one over the
vocabulary (:mod:`.mask_replay`: milliseconds per record where an ``Index`` at Qwen's 151k
tokens costs most of a CPU-second).

Adjustment phases: ``min(owed, sites)`` lines, each any option of any site (``WAIVE``
included). A regular expression cannot say "a site not used yet" without listing every
combination, so a second build or disband at one site is possible; :func:`.prompt.extract_orders`
counts it invalid and keeps the first (the one place the constraint is looser than the rules).

:class:`OrderChoices` is one seat's constraint as plain data (a training record's payload);
:meth:`OrderChoices.regex` writes the expression.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from leaguezero.diplomacy.llm.orders.prompt import END_MARK

_REGEX_META = re.compile(r"([\\.^$*+?()\[\]{}|])")


def regex_literal(text: str) -> str:
    """``text`` as a regular expression matching exactly it (the metacharacters escaped; a
    newline written ``\\n``), in the syntax vLLM's grammar backends and outlines-core share."""
    return _REGEX_META.sub(r"\\\1", text).replace("\n", r"\n")


def choice_regex(options: Sequence[str]) -> str:
    """A regular expression matching exactly one of ``options`` (a ``choice`` list)."""
    if not options:
        raise ValueError("a choice list needs at least one option")
    return "(" + "|".join(regex_literal(o) for o in options) + ")"


@dataclass(frozen=True)
class OrderChoices:
    """What one seat's constrained answer may contain (see module doc).

    ``legal``: ``{location: legal orders}``; ``phase_type``: ``M``, ``R`` or ``A``;
    ``owed``: builds or disbands owed in an adjustment phase.
    """

    legal: Mapping[str, Sequence[str]]
    phase_type: str = "M"
    owed: int | None = None

    def line_patterns(self) -> list[str]:
        """The answer's regular expression line by line: one per order line (each ending in
        ``\\n``), then ``END``."""
        lines: list[str] = []
        if self.phase_type == "A":
            sites = {loc: opts for loc, opts in sorted(self.legal.items()) if opts}
            options = list(dict.fromkeys(o for opts in sites.values() for o in opts))
            for number in range(1, min(self.owed or 0, len(sites)) + 1):
                lines.append(f"{number}\\) " + choice_regex(options) + r"\n")
        else:
            located = [loc for loc in sorted(self.legal) if self.legal[loc]]
            for number, loc in enumerate(located, 1):
                options = list(dict.fromkeys(self.legal[loc]))
                lines.append(f"{number}\\) " + choice_regex(options) + r"\n")
        return [*lines, regex_literal(END_MARK)]

    def regex(self) -> str:
        """The answer's regular expression (``structured_outputs.regex``)."""
        return "".join(self.line_patterns())

    def admits(self, text: str, finished: bool) -> bool:
        """Whether ``text`` keeps this constraint: matches it whole when ``finished``, else (a
        completion cut at its token budget) starts a match."""
        from leaguezero.diplomacy.llm.orders.mask_replay import byte_index

        index = byte_index(self.regex())
        state = index.get_initial_state()
        for byte in text.encode("utf-8"):
            state = index.get_next_state(state, byte)
            if state is None:
                return False
        return index.is_final_state(state) if finished else True


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable stand-in of each byte -> the byte."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_bytes(tokenizer) -> dict[bytes, list[int]]:
    """The bytes each ordinary token of a Hugging Face tokenizer writes (special tokens left out).

    Byte-level BPE (GPT-2, Llama 3, Qwen, the base ``llm pretrain`` builds) maps its printable
    alphabet back to bytes; SentencePiece-style vocabularies (Llama 2, Mistral) write ``▁`` for
    a space and ``<0xNN>`` for a raw byte.
    """
    decoder_type = ""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str()).get("decoder") or {}
        kinds = [spec.get("type")] + [d.get("type") for d in spec.get("decoders") or []]
        decoder_type = "bytelevel" if "ByteLevel" in kinds else ""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special |= {i for i, t in added.items() if getattr(t, "special", False)}
    byte_of = _byte_decoder() if decoder_type == "bytelevel" else None
    out: dict[bytes, list[int]] = {}
    for token, token_id in tokenizer.get_vocab().items():
        if token_id in special:
            continue
        if byte_of is not None and all(c in byte_of for c in token):
            raw = bytes(byte_of[c] for c in token)
        elif (m := _BYTE_FALLBACK.match(token)) is not None:
            raw = bytes([int(m.group(1), 16)])
        else:
            raw = token.replace("\u2581", " ").encode("utf-8")
        if raw:
            out.setdefault(raw, []).append(int(token_id))
    return out


class ConstraintCompiler:
    """Regular expressions compiled to token masks for one tokenizer (cached, thread-safe).

    ``eos_id``: the token that ends a completion (allowed only once the expression is matched).
    """

    def __init__(self, tokenizer, eos_id: int, cache_size: int = 512) -> None:
        from outlines_core import Vocabulary

        vocab = token_bytes(tokenizer)
        for ids in vocab.values():
            if eos_id in ids:
                ids.remove(eos_id)
        self.eos_id = int(eos_id)
        self._bytes = {k: v for k, v in vocab.items() if v}
        self._vocabulary = Vocabulary(self.eos_id, self._bytes)
        self._trie = None  # the token trie of mask replay, built on first use
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def vocabulary(self):
        """The :class:`outlines_core.Vocabulary` of the tokenizer (llm serve's compile workers)."""
        return self._vocabulary

    def index(self, regex: str):
        """The :class:`outlines_core.Index` of ``regex``; ``ValueError`` (one line) when the
        expression is not valid or the vocabulary cannot write it."""
        with self._lock:
            found = self._cache.get(regex)
            if found is not None:
                self._cache.move_to_end(regex)
                return found
        from outlines_core import Index

        try:
            index = Index(regex, self._vocabulary)
        except (ValueError, RuntimeError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"cannot constrain to that regex: {first[:300]}") from None
        with self._lock:
            self._cache[regex] = index
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return index

    @property
    def trie(self):
        """The vocabulary's :class:`.mask_replay.TokenTrie` (built once, ~1 s at 151k tokens)."""
        with self._lock:
            if self._trie is None:
                from leaguezero.diplomacy.llm.orders.mask_replay import TokenTrie

                self._trie = TokenTrie(self._bytes, self.eos_id)
            return self._trie

    def machine(self, regex: str) -> RegexMachine:
        """A fresh walk through ``regex``'s token masks."""
        return RegexMachine(self.index(regex), self.eos_id)

    def order_machine(self, choices: OrderChoices) -> Machine:
        """A fresh walk through an order list's expression by the token trie
        (:class:`.mask_replay.TrieMachine`: no index over the vocabulary to build)."""
        return self.trie.machine(choices.regex())


class Machine(Protocol):
    """One constrained completion, token by token: :meth:`allowed` then :meth:`step`
    (:class:`RegexMachine`, or :class:`.mask_replay.TrieMachine` for order lists)."""

    done: bool  # end-of-sequence was written

    def allowed(self) -> list[int]: ...

    def step(self, token: int) -> None: ...


class RegexMachine:
    """One constrained completion, token by token: :meth:`allowed` then :meth:`step`."""

    def __init__(self, index, eos_id: int) -> None:
        self._index = index
        self._eos_id = eos_id
        self._state = index.get_initial_state()
        self.done = False

    def allowed(self) -> list[int]:
        """Tokens that may come next (empty once end-of-sequence was written)."""
        if self.done:
            return []
        return list(self._index.get_allowed_tokens(self._state))

    def step(self, token: int) -> None:
        """Advance by ``token``; ``ValueError`` if it is not allowed."""
        token = int(token)
        if not self.done and token == self._eos_id and self._index.is_final_state(self._state):
            self.done = True
            return
        nxt = None if self.done else self._index.get_next_state(self._state, token)
        if nxt is None:
            raise ValueError(f"token {token} is not a legal continuation here")
        self._state = nxt


_BROKEN = (
    "completion token {token} at position {position} breaks its constraint (was it sampled "
    "without llm.mode=constrained, or by a server that ignored structured_outputs?)"
)


def replay_allowed(
    compiler: ConstraintCompiler, choices: OrderChoices, token_ids: Sequence[int]
) -> list[list[int]]:
    """The allowed token set at each position of a constrained completion (for training): the
    sets of :func:`replay_allowed_index`, from the compiler's token trie (:mod:`.mask_replay`;
    ids in ascending order within a token's bytes, not outlines-core's order).

    ``ValueError`` if a token was not allowed (the sampler ignored the constraint).
    """
    allowed, bad = compiler.trie.replay(choices.regex(), token_ids)
    if bad >= 0:
        raise ValueError(_BROKEN.format(token=int(token_ids[bad]), position=bad))
    return allowed


def replay_allowed_index(
    compiler: ConstraintCompiler, choices: OrderChoices, token_ids: Sequence[int]
) -> list[list[int]]:
    """:func:`replay_allowed` by an ``outlines_core.Index`` over the whole vocabulary (what the
    in-process sampler walks): the reference, 0.6-1.0 CPU-s per expression at 151k tokens."""
    machine = compiler.machine(choices.regex())
    allowed = []
    for token in token_ids:
        options = machine.allowed()
        if int(token) not in options:
            raise ValueError(_BROKEN.format(token=int(token), position=len(allowed)))
        allowed.append(options)
        machine.step(int(token))
    return allowed
