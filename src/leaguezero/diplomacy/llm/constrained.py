"""Constrained decoding: the model writes its answer token by token, but only legal orders.

In ``llm.mode: constrained`` the completion has the free-generation layout (one numbered
order per line, then ``END`` and end-of-sequence, :func:`~.pretrain.answer_text`) but every
token is sampled from the model's distribution *restricted to the tokens that keep the answer
legal*: line *k* must be ``"{k}) {order}\\n"`` for one of location *k*'s legal orders (a token
trie of those lines), then ``END`` and EOS are forced. Every order is legal by construction,
and the policy is still the language model's own: where a line has one continuation the token
is forced (probability 1, no gradient); where it branches the model chooses.

The policy's log-probability of a token is ``log_softmax`` over the *allowed* tokens only
(the raw logits, temperature 1) — the probability the constrained sampler really used, so
GRPO's ratios are of the policy that played. :class:`AnswerMachine` replays a completion's
tokens to give the allowed set at each position, which the trainer uses to recompute the same
masked log-probs (:meth:`~.hf_backend.HFBackend.logprobs` with ``allowed``).

Adjustment phases: ``owed`` lines, each from the options of the sites not yet used
(``WAIVE`` leaves its site open), numbered 1, 2, ...; fewer sites than owed: one line per site.

:class:`OrderChoices` is the whole constraint of one seat's answer as plain data (JSON for a
server request, the training record's payload); the machine is built from it and a tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leaguezero.diplomacy.llm.prompt import END_MARK, WAIVE


@dataclass(frozen=True)
class OrderChoices:
    """What one seat's constrained answer may contain (see module doc).

    ``legal``: ``{location: legal orders}``; ``phase_type``: ``M``, ``R`` or ``A``;
    ``owed``: builds or disbands owed in an adjustment phase.
    """

    legal: Mapping[str, Sequence[str]]
    phase_type: str = "M"
    owed: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain data (a server request's ``leaguezero_choices`` field)."""
        return {
            "legal": {loc: list(opts) for loc, opts in self.legal.items()},
            "phase_type": self.phase_type,
            "owed": self.owed,
        }

    @classmethod
    def from_json(cls, data: Any) -> OrderChoices:
        """The inverse of :meth:`to_json`; ``ValueError`` with one line on a malformed value."""
        if not isinstance(data, dict) or not isinstance(data.get("legal"), dict):
            raise ValueError("leaguezero_choices must be an object with a 'legal' object")
        legal = data["legal"]
        for loc, opts in legal.items():
            if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
                raise ValueError(f"leaguezero_choices: options of {loc!r} must be strings")
        phase_type = data.get("phase_type", "M")
        if phase_type not in ("M", "R", "A"):
            raise ValueError(f"leaguezero_choices: phase_type {phase_type!r} not M, R or A")
        owed = data.get("owed")
        if owed is not None and (not isinstance(owed, int) or owed < 0):
            raise ValueError("leaguezero_choices: owed must be a non-negative integer or null")
        return cls({str(k): list(v) for k, v in legal.items()}, phase_type, owed)


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    line: int | None = None  # index of the line this node ends (a leaf)


class _LineTrie:
    """Token sequences of a slot's lines; ``lines[i]`` is ``(location, order)``."""

    def __init__(self, sequences: Sequence[Sequence[int]], lines: Sequence[tuple[str, str]]):
        self.root = _Node()
        self.lines = list(lines)
        for i, seq in enumerate(sequences):
            if not seq:
                raise ValueError("a constrained line encoded to no tokens")
            node = self.root
            for token in seq:
                if node.line is not None:
                    raise ValueError("a constrained line is a prefix of another")
                node = node.children.setdefault(token, _Node())
            if node.line is not None:
                continue  # the same line twice (e.g. WAIVE at several sites): the first counts
            if node.children:
                raise ValueError("a constrained line is a prefix of another")
            node.line = i


class AnswerMachine:
    """The legal continuations of one constrained answer, token by token (see module doc).

    ``tokenizer``: the model's tokenizer; ``eos_id``: the token that ends the completion;
    ``cache``: a ``{text: token ids}`` dict shared between machines of one tokenizer.
    """

    def __init__(
        self,
        tokenizer,
        choices: OrderChoices,
        eos_id: int,
        cache: dict[str, list[int]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.choices = choices
        self.eos_id = int(eos_id)
        self._encode_cache: dict[str, list[int]] = cache if cache is not None else {}
        self.chosen: list[tuple[str, str]] = []  # (location, order) of each finished line
        self.done = False
        if choices.phase_type == "A":
            self._sites = {loc: list(opts) for loc, opts in sorted(choices.legal.items()) if opts}
            self._slots_left = min(choices.owed or 0, len(self._sites))
            self._slot_number = 0
        else:
            self._movement = [
                (k, loc) for k, loc in enumerate(sorted(choices.legal), 1) if choices.legal[loc]
            ]
        self._tail: list[int] = []  # forced tokens after the last line: END, EOS
        self._trie: _LineTrie | None = None
        self._node: _Node | None = None
        self._next_slot()

    def _encode(self, text: str) -> list[int]:
        ids = self._encode_cache.get(text)
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            self._encode_cache[text] = ids
        return ids

    def _open(self, number: int, options: Sequence[tuple[str, str]]) -> None:
        seqs = [self._encode(f"{number}) {order}\n") for _, order in options]
        self._trie = _LineTrie(seqs, options)
        self._node = self._trie.root

    def _next_slot(self) -> None:
        self._trie = self._node = None
        if self.choices.phase_type == "A":
            if self._slots_left > 0 and self._sites:
                self._slots_left -= 1
                self._slot_number += 1
                options = [(loc, o) for loc, opts in self._sites.items() for o in opts]
                self._open(self._slot_number, options)
                return
        else:
            if self._movement:
                number, loc = self._movement.pop(0)
                self._open(number, [(loc, o) for o in self.choices.legal[loc]])
                return
        self._tail = [*self._encode(END_MARK), self.eos_id]

    def allowed(self) -> list[int]:
        """Tokens that may come next (empty once the answer is complete)."""
        if self.done:
            return []
        if self._node is not None:
            return list(self._node.children)
        return self._tail[:1]

    def step(self, token: int) -> None:
        """Advance by ``token``; ``ValueError`` if it is not allowed."""
        if self.done:
            raise ValueError("the constrained answer is already complete")
        if self._node is not None:
            nxt = self._node.children.get(int(token))
            if nxt is None:
                raise ValueError(f"token {token} is not a legal continuation here")
            if nxt.line is not None and not nxt.children:
                assert self._trie is not None
                loc, order = self._trie.lines[nxt.line]
                self.chosen.append((loc, order))
                if self.choices.phase_type == "A" and order != WAIVE:
                    self._sites.pop(loc, None)
                self._next_slot()
            else:
                self._node = nxt
            return
        if not self._tail or int(token) != self._tail[0]:
            raise ValueError(f"token {token} is not a legal continuation here")
        self._tail.pop(0)
        self.done = not self._tail

    @property
    def orders(self) -> list[str]:
        """The orders of the lines finished so far."""
        return [order for _, order in self.chosen]


def replay_allowed(
    tokenizer,
    choices: OrderChoices,
    token_ids: Sequence[int],
    eos_id: int,
    cache: dict[str, list[int]] | None = None,
) -> list[list[int]]:
    """The allowed token set at each position of a constrained completion (for training).

    ``ValueError`` if a token was not allowed (the sampler ignored the constraint).
    """
    machine = AnswerMachine(tokenizer, choices, eos_id, cache)
    allowed = []
    for token in token_ids:
        options = machine.allowed()
        if int(token) not in options:
            raise ValueError(
                f"completion token {token} at position {len(allowed)} breaks its constraint "
                "(was it sampled without llm.mode=constrained?)"
            )
        allowed.append(options)
        machine.step(int(token))
    return allowed
