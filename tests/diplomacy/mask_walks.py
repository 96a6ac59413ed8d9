"""The walk-and-compare harness of the grammar agreement tests: an engine's token masks against
the trainer's replay (``ConstraintCompiler.trie.replay``, what ``replay_allowed`` gives).

Per record, two walks: tokens drawn uniformly from the engine's mask until it is done (any
tokenisation), and a walk through *every* option of every answer line in the tokenizer's own
encoding, rolling the engine back after each option and going on with a random one, so rare
lines such as convoys are walked as surely as moves. An engine is a :class:`Walker` per record,
from the test's ``start(choices, rollback)``.
"""

from __future__ import annotations

import random
from typing import Protocol

from tests.diplomacy.tiny_lm import answer_lines


class Walker(Protocol):
    """One constrained request in an engine."""

    def mask(self) -> set[int]:
        """The token ids the engine allows next."""

    def done(self, tokens: list[int]) -> bool:
        """Whether the random walk (``tokens`` so far) is over."""

    def step(self, token: int) -> bool:
        """Take a token of the random walk; False when the engine refuses it (the walk ends and
        the comparison reports the step)."""

    def advance(self, token: int) -> None:
        """Take a token of an answer line (one the mask allowed)."""

    def rollback(self, tokens: list[int]) -> None:
        """Undo the line's ``tokens``."""


def compare_walks(compiler, tokenizer, records, rng: random.Random, start, after_walk=None):
    """Steps compared and the differing steps ``(record, step, engine only, trainer only)``;
    ``after_walk(choices, tokens)`` runs after a random walk that agreed all the way."""
    eos = compiler.eos_id
    steps, differences = 0, []

    def check(k, regex, tokens, masks) -> bool:
        nonlocal steps
        trainer, _ = compiler.trie.replay(regex, tokens)  # replay_allowed's sets
        for t in range(len(tokens) - len(masks), len(tokens)):
            steps += 1
            ours, theirs = set(trainer[t]) if t < len(trainer) else set(), masks[t - len(tokens)]
            if ours != theirs:
                differences.append((k, t, sorted(theirs - ours), sorted(ours - theirs)))
                return False
        return True

    for k, choices in enumerate(records):
        regex = choices.regex()
        walker, tokens, masks = start(choices, rollback=False), [], []
        while not walker.done(tokens):
            masks.append(walker.mask())
            tokens.append(rng.choice(sorted(masks[-1])))
            if not walker.step(tokens[-1]):
                break
        if check(k, regex, tokens, masks) and after_walk is not None:
            after_walk(choices, tokens)
        walker, prefix = start(choices, rollback=True), []
        for options in [*answer_lines(choices), None]:
            encoded = (
                [[eos]]
                if options is None
                else [tokenizer.encode(text, add_special_tokens=False) for text in options]
            )
            for line in encoded:
                masks = []
                for token in line:
                    masks.append(walker.mask())
                    if token not in masks[-1]:
                        break
                    walker.advance(token)
                if not check(k, regex, prefix + line[: len(masks)], masks):
                    break
                walker.rollback(line[: len(masks)])
            else:
                line = rng.choice(encoded)
                for token in line:
                    walker.advance(token)
                prefix += line
                continue
            break
    return steps, differences


def describe(engine: str, tokenizer, records, differences) -> str:
    """The first differing step in one line."""
    k, t, extra, missing = differences[0]
    return (
        f"{engine}: {len(differences)} differing steps; first in record {k} step {t}: engine "
        f"only {[tokenizer.decode([i]) for i in extra[:5]]}, trainer only "
        f"{[tokenizer.decode([i]) for i in missing[:5]]}; expression {records[k].regex()[:200]}"
    )
