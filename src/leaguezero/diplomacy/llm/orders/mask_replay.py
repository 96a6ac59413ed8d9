"""Mask replay in milliseconds: a completion's allowed token sets from a byte automaton and a
token trie, equal to an ``outlines_core.Index``'s without building one over the vocabulary.

The trainer needs the allowed set at each position of each constrained completion
(:func:`.constrained.replay_allowed`). An ``outlines_core.Index`` answers that by walking
*every* token of the vocabulary from *every* state of the expression's automaton: at Qwen's 151k
byte-level tokens that is 0.05-1.8 CPU-s per record (0.77 on average in
``benchmarks/mask_replay.py``; this way 0.003), serially after each rollout. Only the states the
completion passes through matter, and at each of them only the tokens whose bytes stay alive — a
handful of branches, because the expressions are alternations of literal orders.

So: the expression's **byte automaton** (an ``outlines_core.Index`` over the 256 single bytes:
the same regex compiler, a few milliseconds) as a dense table (states by the bytes it uses), and
the vocabulary's **prefix trie** of token bytes (built once per tokenizer, ~1 s at 151k). At
each position a depth-first walk down the trie follows only the bytes the automaton accepts from
the current state; every token ending on a node it reaches is allowed. End-of-sequence is
allowed exactly in the final states. That is outlines-core's rule (a token is allowed when its
bytes keep the text a prefix of a match), checked byte by byte where outlines-core checks the
token's last state; the two agree for expressions in which no match continues into a longer one
(every expression :class:`.constrained.OrderChoices` writes ends in ``END``), which
``tests/diplomacy/llm/orders/test_mask_replay.py`` checks against outlines-core on records of
real games.

The walks run in numba (compiled once, cached on disk).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
from numba import njit


@functools.lru_cache(maxsize=256)
def byte_index(regex: str):
    """``regex`` over a vocabulary of the 256 single bytes (text checks, no tokenizer)."""
    from outlines_core import Index, Vocabulary

    return Index(regex, Vocabulary(256, {bytes([b]): [b] for b in range(256)}))


@functools.lru_cache(maxsize=64)
def byte_automaton(regex: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(table, classes, final)`` of ``regex``'s byte automaton, dense ids from 0 (the initial
    state): ``table[s, classes[b]]`` is the state after byte ``b`` from state ``s`` (-1: dead);
    ``classes`` numbers the bytes the expression uses from 1 (0: any other byte, dead from
    everywhere), so a table of ~1,100 states (a 4 kB expression) holds ~40 columns, not 256;
    ``final[s]``: whether the text may end in state ``s``."""
    index = byte_index(regex)
    transitions = index.get_transitions()
    ids: dict[int, int] = {index.get_initial_state(): 0}
    used: set[int] = set()
    for state, moves in transitions.items():
        ids.setdefault(state, len(ids))
        for byte, target in moves.items():
            if byte < 256:  # 256 is this vocabulary's end-of-sequence
                ids.setdefault(target, len(ids))
                used.add(byte)
    classes = np.zeros(256, dtype=np.int32)
    classes[sorted(used)] = np.arange(1, len(used) + 1, dtype=np.int32)
    table = np.full((len(ids), len(used) + 1), -1, dtype=np.int32)
    for state, moves in transitions.items():
        for byte, target in moves.items():
            if byte < 256:
                table[ids[state], classes[byte]] = ids[target]
    final = np.zeros(len(ids), dtype=np.bool_)
    for state in index.get_final_states():
        if state in ids:
            final[ids[state]] = True
    return table, classes, final


@njit(cache=True)
def _build_trie(data, offsets, order, max_len):  # pragma: no cover - numba
    """Trie nodes of the byte strings ``data[offsets[s]:offsets[s + 1]]`` taken in sorted
    ``order``: each node's parent and byte, and the node each string ends on."""
    parent = np.empty(len(data) + 1, np.int32)
    label = np.empty(len(data) + 1, np.int32)
    ends = np.empty(len(offsets) - 1, np.int32)
    path = np.zeros(max_len + 1, np.int32)
    parent[0] = -1
    label[0] = -1
    nodes = 1
    prev_start = 0
    prev_len = 0
    for k in range(len(order)):
        s = order[k]
        start = offsets[s]
        length = offsets[s + 1] - start
        common = 0
        while (
            common < length
            and common < prev_len
            and data[start + common] == data[prev_start + common]
        ):
            common += 1
        for depth in range(common, length):
            parent[nodes] = path[depth]
            label[nodes] = data[start + depth]
            path[depth + 1] = nodes
            nodes += 1
        ends[s] = path[length]
        prev_start = start
        prev_len = length
    return parent[:nodes], label[:nodes], ends


@njit(cache=True)
def _allowed_from(
    state, table, classes, final, child_ptr, child_byte, child_node, tok_ptr, tok_ids, eos
):  # pragma: no cover - numba
    """The ids allowed from automaton ``state``: end-of-sequence first when it is final, then
    every token on a trie node whose bytes the automaton follows (a depth-first walk)."""
    out = np.empty(64, np.int32)
    count = 0
    if final[state]:
        out[0] = eos
        count = 1
    stack_node = np.empty(64, np.int32)
    stack_state = np.empty(64, np.int32)
    top = 1
    stack_node[0] = 0
    stack_state[0] = state
    while top > 0:
        top -= 1
        node = stack_node[top]
        q = stack_state[top]
        for e in range(child_ptr[node], child_ptr[node + 1]):
            nxt = table[q, classes[child_byte[e]]]
            if nxt < 0:
                continue
            child = child_node[e]
            for i in range(tok_ptr[child], tok_ptr[child + 1]):
                if count == len(out):
                    out = np.concatenate((out, np.empty(len(out), np.int32)))
                out[count] = tok_ids[i]
                count += 1
            if child_ptr[child] < child_ptr[child + 1]:
                if top == len(stack_node):
                    stack_node = np.concatenate((stack_node, stack_node))
                    stack_state = np.concatenate((stack_state, stack_state))
                stack_node[top] = child
                stack_state[top] = nxt
                top += 1
    return out[:count]


@njit(cache=True)
def _advance(state, token, table, classes, id_start, id_len, data):  # pragma: no cover - numba
    """The automaton's state after ``token``'s bytes (-1: dead, or an id with no bytes)."""
    if token < 0 or token >= len(id_len) or id_len[token] == 0:
        return -1
    for i in range(id_start[token], id_start[token] + id_len[token]):
        state = table[state, classes[data[i]]]
        if state < 0:
            return -1
    return state


@njit(cache=True)
def _replay(
    table,
    classes,
    final,
    child_ptr,
    child_byte,
    child_node,
    tok_ptr,
    tok_ids,
    id_start,
    id_len,
    data,
    tokens,
    eos,
):  # pragma: no cover - numba
    """Allowed ids of every position, flat, with their offsets; and the first position whose
    token was not allowed (-1: none)."""
    state = 0
    out = np.empty(4096, np.int32)
    ptr = np.zeros(len(tokens) + 1, np.int64)
    count = 0
    done = False
    for t in range(len(tokens)):
        token = tokens[t]
        ok = False
        if not done:
            allowed = _allowed_from(
                state, table, classes, final, child_ptr, child_byte, child_node, tok_ptr,
                tok_ids, eos,
            )  # fmt: skip
            while count + len(allowed) > len(out):
                out = np.concatenate((out, np.empty(len(out), np.int32)))
            out[count : count + len(allowed)] = allowed
            count += len(allowed)
            for i in range(len(allowed)):
                ok = ok or allowed[i] == token
        ptr[t + 1] = count
        if not ok:
            return out[:count], ptr[: t + 2], t
        if token == eos:
            done = True
        else:
            state = _advance(state, token, table, classes, id_start, id_len, data)
    return out[:count], ptr, -1


class TokenTrie:
    """The prefix trie of a vocabulary's token bytes, as arrays (see module doc).

    ``vocab``: ``{token bytes: [ids]}`` (:func:`.constrained.token_bytes`, end-of-sequence left
    out); ``eos_id``: the end-of-sequence token.
    """

    def __init__(self, vocab: Mapping[bytes, Sequence[int]], eos_id: int) -> None:
        strings = [s for s, ids in vocab.items() if s and ids]
        lengths = np.fromiter((len(s) for s in strings), dtype=np.int64, count=len(strings))
        offsets = np.zeros(len(strings) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(strings), dtype=np.uint8)
        order = np.array(sorted(range(len(strings)), key=strings.__getitem__), dtype=np.int64)
        parent, label, ends = _build_trie(data, offsets, order, int(lengths.max(initial=0)))
        edges = np.lexsort((label[1:], parent[1:])) + 1  # children grouped by parent
        self.child_ptr = np.searchsorted(parent[edges], np.arange(len(parent) + 1)).astype(np.int64)
        self.child_byte = label[edges].astype(np.int32)
        self.child_node = edges.astype(np.int32)
        pairs = [(int(ends[s]), int(i)) for s, st in enumerate(strings) for i in vocab[st]]
        pairs.sort()
        nodes = np.array([n for n, _ in pairs], dtype=np.int64)
        self.tok_ids = np.array([i for _, i in pairs], dtype=np.int32)
        self.tok_ptr = np.searchsorted(nodes, np.arange(len(parent) + 1)).astype(np.int64)
        size = max([eos_id, *(i for _, i in pairs)]) + 1
        self.id_start = np.zeros(size, dtype=np.int64)
        self.id_len = np.zeros(size, dtype=np.int64)
        for s, st in enumerate(strings):
            for i in vocab[st]:
                self.id_start[i] = offsets[s]
                self.id_len[i] = len(st)
        self.data = data
        self.eos_id = int(eos_id)
        self.nodes = len(parent)

    def replay(self, regex: str, token_ids: Sequence[int]) -> tuple[list[list[int]], int]:
        """The allowed ids at each position of ``token_ids`` under ``regex``, up to and
        including the first token that was not allowed, and that position (-1: none)."""
        table, classes, final = byte_automaton(regex)
        tokens = np.asarray(token_ids, dtype=np.int64)
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= len(self.id_start)):
            tokens = np.where((tokens < 0) | (tokens >= len(self.id_start)), -2, tokens)
        flat, ptr, bad = _replay(
            table, classes, final, self.child_ptr, self.child_byte, self.child_node,
            self.tok_ptr, self.tok_ids, self.id_start, self.id_len, self.data, tokens,
            self.eos_id,
        )  # fmt: skip
        flat = flat.tolist()
        return [flat[ptr[t] : ptr[t + 1]] for t in range(len(ptr) - 1)], int(bad)

    def machine(self, regex: str) -> TrieMachine:
        """A fresh walk through ``regex`` token by token (:class:`TrieMachine`)."""
        return TrieMachine(self, regex)


class TrieMachine:
    """One constrained completion, token by token, from the byte automaton and the trie: what
    :class:`.constrained.RegexMachine` does over an ``outlines_core.Index``, without building
    the index over the vocabulary (0.1-0.2 CPU-s an expression at SmolLM2's 49k tokens, a new
    one for every phase and power). The same allowed sets for :class:`.constrained.OrderChoices`
    expressions (the module doc), in the trie's order: end-of-sequence first where the text
    may end, then by token bytes."""

    def __init__(self, trie: TokenTrie, regex: str) -> None:
        self._trie = trie
        self._table, self._classes, self._final = byte_automaton(regex)
        self._state = 0
        self.done = False

    def allowed(self) -> list[int]:
        """Tokens that may come next (empty once end-of-sequence was written)."""
        if self.done:
            return []
        t = self._trie
        return _allowed_from(
            self._state, self._table, self._classes, self._final, t.child_ptr, t.child_byte,
            t.child_node, t.tok_ptr, t.tok_ids, t.eos_id,
        ).tolist()  # fmt: skip

    def step(self, token: int) -> None:
        """Advance by ``token``; ``ValueError`` if it is not allowed."""
        token = int(token)
        t = self._trie
        if not self.done and token == t.eos_id and self._final[self._state]:
            self.done = True
            return
        nxt = -1
        if not self.done:
            nxt = _advance(
                self._state, token, self._table, self._classes, t.id_start, t.id_len, t.data
            )
        if nxt < 0:
            raise ValueError(f"token {token} is not a legal continuation here")
        self._state = int(nxt)
