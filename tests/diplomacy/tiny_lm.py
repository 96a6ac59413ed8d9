"""A tiny causal LM and tokenizer built on the spot (no downloads), for LLM-path tests.

``build_tiny_lm(folder)`` trains a byte-level BPE tokenizer on Diplomacy prompts of the
opening position (so prompts stay a few hundred tokens), wraps it in
``PreTrainedTokenizerFast``, builds a 2-layer Llama with hidden size 32 and saves both with
``save_pretrained`` into ``folder`` — a folder that ``HFBackend.from_pretrained`` and
``leaguezero llm serve --base-model`` take like any real model. Deterministic for a seed.
Shared with the GRPO tests.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

EOS = "<|eos|>"


def diplomacy_corpus() -> list[str]:
    """Prompts of every power in the opening phase, plus a few answer-like lines."""
    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.llm.orders.prompt import build_prompt

    env = DiplomacyEnv(max_years=1)
    texts = [build_prompt(env, power, env.legal_orders(power)) for power in POWERS]
    for power in POWERS:
        texts.extend("\n".join(options) for options in env.legal_orders(power).values())
    texts.append("A PAR - BUR\nF BRE - MAO\nA MAR H\nEND\n")
    return texts


def game_choices(games: int, years: int, seed: int) -> list:
    """Every seat-phase's constraint (:class:`OrderChoices`) in ``games`` games of bots
    (random, chaos and greedy seats: attacks, so retreats too; fleets, so convoys)."""
    import random

    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.game.seats import resolve_agent
    from leaguezero.diplomacy.llm.orders.constrained import OrderChoices

    bots_named = ("random_bot", "chaos_bot", "greedy_bot")
    rng = random.Random(seed)
    out = []
    for _ in range(games):
        env = DiplomacyEnv(max_years=years)
        bots = {p: resolve_agent(rng.choice(bots_named), rng.getrandbits(32)) for p in POWERS}
        while not env.done:
            for power in POWERS:
                legal = env.legal_orders(power)
                if legal:
                    owed = abs(env.adjustment_count(power)) if env.phase_type == "A" else None
                    out.append(OrderChoices(legal, env.phase_type, owed))
                    env.set_orders(power, bots[power].get_orders(env, power))
            env.process()
    return out


def build_tokenizer(vocab_size: int = 512, corpus: list[str] | None = None):
    """A byte-level BPE tokenizer (any text encodes, no unknown tokens) with one EOS/pad."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus if corpus is not None else diplomacy_corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def record_corpus(records) -> list[str]:
    """Texts to train a tokenizer on for ``records`` (:func:`game_choices`): each record's
    options one a line, and an answer of each (every line's first option, then ``END``)."""
    answers = [
        "".join(f"{n}) {opts[0]}\n" for n, opts in enumerate(c.legal.values(), 1)) + "END"
        for c in records
    ]
    corpus = ["\n".join(o for opts in c.legal.values() for o in opts) for c in records]
    return corpus + answers


def answer_lines(choices) -> list[list[str]]:
    """Each answer line's possible texts (``"k) order\\n"``), then ``["END"]``."""
    legal = {loc: opts for loc, opts in sorted(choices.legal.items()) if opts}
    if choices.phase_type == "A":
        pooled = list(dict.fromkeys(o for opts in legal.values() for o in opts))
        options = [pooled] * min(choices.owed or 0, len(legal))
    else:
        options = [list(dict.fromkeys(opts)) for opts in legal.values()]
    lines = [[f"{n}) {order}\n" for order in opts] for n, opts in enumerate(options, 1)]
    return [*lines, ["END"]]


def line_tokenizer(corpus: list[str], vocab: int):
    """A byte-level BPE whose tokens may span spaces and lines (no pre-splitting into words):
    tokens such as ``S A SYR - SMY\n2)`` cross the expression's option boundaries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|eos|>"], initial_alphabet=alphabet
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eos|>", pad_token="<|eos|>")


def build_tiny_model(tokenizer, seed: int = 0, layers: int = 2, hidden: int = 32):
    """A randomly initialised Llama small enough to sample a few hundred tokens per second."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def build_tiny_lm(folder: str | Path, seed: int = 0) -> Path:
    """Save a tiny model + tokenizer into ``folder`` (created) and return it."""
    folder = Path(folder)
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_base(folder: str | Path) -> tuple[Path, dict]:
    """``leaguezero llm pretrain`` at toy size into ``folder``: (folder, its report)."""
    from leaguezero.diplomacy.llm.base.pretrain import PretrainSettings, pretrain

    settings = PretrainSettings(
        games=3, steps=8, hidden=32, layers=1, heads=2, batch_tokens=2048, vocab_size=360,
        held_out=4, warmup=2,
    )  # fmt: skip
    return Path(folder), pretrain(folder, settings, log=lambda _: None)


def start_llm_server(base_model: str | Path, *extra: str, name: str = "tiny"):
    """Start ``leaguezero llm serve`` on a free loopback port; returns ``(process, url)``.

    Waits for its ``serving NAME on URL`` line (120 s at most, then kills it).
    """
    import subprocess
    import sys
    import threading

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "leaguezero.cli", "llm", "serve", "--base-model",
           str(base_model), "--port", "0", "--served-model-name", name, *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timer = threading.Timer(120, proc.kill)
    timer.start()
    try:
        line = proc.stdout.readline()
    finally:
        timer.cancel()
    if "serving" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, line.split(" on ")[1].strip()
