"""Mask replay at a real vocabulary size: an outlines-core ``Index`` per record against the
token trie of :mod:`leaguezero.diplomacy.llm.orders.mask_replay` (issue 39, item 4).

    python benchmarks/mask_replay.py [--vocab 151643] [--records 30] [--games 2] [--years 4]

**Tokenizer** (built here, nothing downloaded): a byte-level BPE trained with ``tokenizers`` on
Diplomacy prompts and answers (``--bpe`` merges), its vocabulary then filled up to ``--vocab``
ordinary tokens the way a large byte-level vocabulary looks to an order line: every one-, two-
and three-letter upper-case string and every number below 1000, each bare and after a space
(Qwen's vocabulary holds most of them), punctuation pairs, then pseudo-words and non-ASCII byte
strings (other languages) of 2-12 bytes. Filler tokens have no merges, so the tokenizer never
*writes* them, but every mask may pick them, as it may pick any token of a real vocabulary.

**Records**: every seat-phase of ``--games`` random games (``random_bot`` everywhere, all
phase types, fleets and convoys included) of ``--years`` years, in random order; each
completion sampled uniformly among the allowed tokens at each step (odd tokenisations
included, so completions are longer than a model's).

**Timing**: CPU seconds (``time.process_time``, all threads) per record, interleaved record by
record: A = ``replay_allowed_index`` with a fresh ``Index`` (what the trainer did), B =
``replay_allowed`` with its byte-automaton caches cleared (what it does now); the allowed sets of
every step are compared (as sets) and must be equal. The trie is built once per tokenizer
(printed separately). Prints per-record pairs, then the means and the ratio A / B.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import sys
import time

# Run as a script, this folder would shadow the `diplomacy` engine package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv  # noqa: E402
from leaguezero.diplomacy.game.seats import resolve_agent  # noqa: E402
from leaguezero.diplomacy.llm.orders import mask_replay  # noqa: E402
from leaguezero.diplomacy.llm.orders.constrained import (  # noqa: E402
    ConstraintCompiler,
    OrderChoices,
    replay_allowed,
    replay_allowed_index,
)
from leaguezero.diplomacy.llm.orders.prompt import build_prompt  # noqa: E402

EOS = "<|endoftext|>"
BOTS = ("random_bot", "chaos_bot", "greedy_bot")


def game_choices(games: int, years: int, seed: int) -> list[tuple[str, OrderChoices]]:
    """``(prompt, choices)`` of every seat-phase of ``games`` random games."""
    rng = random.Random(seed)
    out = []
    for _ in range(games):
        env = DiplomacyEnv(max_years=years)
        bots = {p: resolve_agent(rng.choice(BOTS), rng.getrandbits(32)) for p in POWERS}
        while not env.done:
            for power in POWERS:
                legal = env.legal_orders(power)
                if not legal:
                    continue
                owed = abs(env.adjustment_count(power)) if env.phase_type == "A" else None
                out.append(
                    (build_prompt(env, power, legal), OrderChoices(legal, env.phase_type, owed))
                )
                env.set_orders(power, bots[power].get_orders(env, power))
            env.process()
    return out


def _filler(rng: random.Random) -> list[bytes]:
    """Byte strings of a large vocabulary's look (see module doc), most order-like first."""
    upper = string.ascii_uppercase
    words = [*upper, *(a + b for a in upper for b in upper)]
    words += [a + b + c for a in upper for b in upper for c in upper]
    words += [str(n) for n in range(1000)]
    punct = " -()/\n.,:;"
    words += [a + b for a in punct for b in punct]
    out = [w.encode() for w in words] + [b" " + w.encode() for w in words]
    letters = string.ascii_letters
    while len(out) < 400_000:
        n = rng.randint(2, 12)
        if rng.random() < 0.7:
            word = "".join(rng.choice(letters) for _ in range(n)).encode()
            out.append(b" " + word if rng.random() < 0.5 else word)
        else:
            out.append(bytes(rng.randint(128, 255) for _ in range(n)))
    return out


def build_tokenizer(texts: list[str], vocab: int, bpe: int, seed: int):
    """A byte-level BPE with ``vocab`` ordinary tokens and one special end-of-sequence."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    spec = json.loads(tok.to_str())
    table = spec["model"]["vocab"]
    alphabet = mask_replay_alphabet()
    for raw in _filler(random.Random(seed)):
        if len(table) > vocab:  # the special token counts once more than the ordinary ones
            break
        table.setdefault("".join(alphabet[b] for b in raw), len(table))
    tok = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def mask_replay_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> its printable stand-in."""
    from leaguezero.diplomacy.llm.orders.constrained import _byte_decoder

    return {b: c for c, b in _byte_decoder().items()}


def sample(compiler: ConstraintCompiler, choices: OrderChoices, rng: random.Random) -> list[int]:
    """A completion drawn uniformly among the allowed tokens at each step."""
    tokens: list[int] = []
    regex = choices.regex()
    while not tokens or tokens[-1] != compiler.eos_id:
        allowed, _ = compiler.trie.replay(regex, [*tokens, -1])
        tokens.append(rng.choice(allowed[-1]))
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151_643, help="ordinary tokens (Qwen2.5's)")
    parser.add_argument("--bpe", type=int, default=4000, help="merges trained on order text")
    parser.add_argument("--records", type=int, default=30)
    parser.add_argument("--games", type=int, default=2)
    parser.add_argument("--years", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    records = game_choices(args.games, args.years, args.seed)
    texts = [p for p, _ in records[:200]]
    texts += ["\n".join(o for opts in c.legal.values() for o in opts) for _, c in records]
    start = time.process_time()
    tokenizer = build_tokenizer(texts, args.vocab, args.bpe, args.seed)
    print(f"tokenizer: {len(tokenizer)} tokens ({time.process_time() - start:.1f} CPU-s)")
    compiler = ConstraintCompiler(tokenizer, tokenizer.eos_token_id)
    start = time.process_time()
    trie = compiler.trie
    print(
        f"token trie: {trie.nodes} nodes, built once per tokenizer in "
        f"{time.process_time() - start:.2f} CPU-s (numba compile included on a cold cache)"
    )
    rng.shuffle(records)
    picked = [c for _, c in records[: args.records]]
    before, after, steps = [], [], 0
    print(f"{'record':>6} {'phase':>5} {'tokens':>6} {'A index s':>10} {'B trie s':>9}")
    for k, choices in enumerate(picked):
        tokens = sample(compiler, choices, rng)
        compiler._cache.clear()  # a fresh Index per record, as the trainer built it
        start = time.process_time()
        reference = replay_allowed_index(compiler, choices, tokens)
        before.append(time.process_time() - start)
        mask_replay.byte_index.cache_clear()
        mask_replay.byte_automaton.cache_clear()
        start = time.process_time()
        fast = replay_allowed(compiler, choices, tokens)
        after.append(time.process_time() - start)
        if [set(a) for a in reference] != [set(b) for b in fast] or any(
            len(a) != len(b) for a, b in zip(reference, fast, strict=True)
        ):
            raise SystemExit(f"record {k}: the allowed sets differ")
        steps += len(tokens)
        print(
            f"{k:>6} {choices.phase_type:>5} {len(tokens):>6} {before[-1]:>10.3f} {after[-1]:>9.4f}"
        )
    a, b = statistics.mean(before), statistics.mean(after)
    print(
        f"CPU-s per record: A (outlines-core Index) {a:.3f} (median "
        f"{statistics.median(before):.3f}), B (token trie) {b:.4f} (median "
        f"{statistics.median(after):.4f}, max {max(after):.4f}); A / B = {a / b:.0f}x; "
        f"{len(picked)} records, {steps} steps, allowed sets equal at every step"
    )


if __name__ == "__main__":
    main()
