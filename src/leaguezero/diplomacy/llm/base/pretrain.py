"""A base LM that plays Diplomacy, built here from bot games (``leaguezero llm pretrain``).

No weights are downloaded anywhere in leaguezero, so the LLM league needs a base model it can
build itself. :func:`pretrain` makes one in minutes on a CPU, one module a step:

1. **Corpus** (:mod:`~leaguezero.diplomacy.llm.base.corpus`): bot games; every phase of every
   recorded seat becomes one (prompt -> answer) example.
2. **Tokenizer and model** (:mod:`~leaguezero.diplomacy.llm.base.lm`): byte-level BPE trained on
   the corpus, with a chat template; a Llama-shaped causal LM from a config (no weights to load).
3. **Training** (:mod:`~leaguezero.diplomacy.llm.base.training`): supervised next-token loss on
   the answer tokens, length-bucketed batches, AdamW with warm-up and cosine decay.
4. **Check** (:mod:`~leaguezero.diplomacy.llm.base.validity`): greedy answers to held-out
   prompts, parsed as the league loop parses them; the share of owed orders that are legal.

The settings (:class:`~leaguezero.diplomacy.llm.base.settings.PretrainSettings`) decide all
four. The output folder is a normal Hugging Face folder (``save_pretrained`` of model and
tokenizer) plus ``leaguezero_base.json`` (schema version, prompt version, settings, corpus and
training figures), so every ``--base-model`` / ``llm.base_model`` option takes it, as it would
take Qwen or Llama.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.diplomacy.llm.base.corpus import Example, collect_examples
from leaguezero.diplomacy.llm.base.lm import build_model, build_tokenizer, encode_example
from leaguezero.diplomacy.llm.base.settings import PretrainSettings
from leaguezero.diplomacy.llm.base.training import train_model
from leaguezero.diplomacy.llm.base.validity import order_validity
from leaguezero.diplomacy.llm.orders.prompt import PROMPT_VERSION

BASE_META = "leaguezero_base.json"
BASE_SCHEMA_VERSION = 1


def pretrain(
    out: str | os.PathLike,
    settings: PretrainSettings,
    *,
    log: Callable[[str], None] = print,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build the base model into ``out`` (see module doc) and return its report.

    Raises ``FileExistsError`` when ``out`` holds files (unless ``overwrite``) and
    ``ValueError`` when the corpus leaves no training examples.
    """
    from leaguezero.diplomacy.llm.runtime import load_backend

    folder = Path(out)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise FileExistsError(f"{folder} exists and is not empty; choose another --out")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    started = time.perf_counter()
    last = [0.0]  # when the last progress line was logged (games and steps share it)
    train, held = _corpus(settings, log, last)
    corpus_seconds = time.perf_counter() - started
    tokenizer, model = _tokenizer_and_model(settings, train)
    encoded = [encode_example(tokenizer, e) for e in train]
    mean_prompt = float(np.mean([len(p) for p, _ in encoded]))
    mean_answer = float(np.mean([len(a) for _, a in encoded]))
    params = sum(p.numel() for p in model.parameters())
    log(
        f"model: {params / 1e6:.2f}M parameters; tokens per example: prompt {mean_prompt:.0f}, "
        f"answer {mean_answer:.0f}; training {settings.steps} steps"
    )
    train_started = time.perf_counter()

    def train_progress(step: int, total: int, loss: float) -> None:
        if time.perf_counter() - last[0] > 15 or step == total:
            last[0] = time.perf_counter()
            rate = step / max(1e-9, time.perf_counter() - train_started)
            log(f"  step {step}/{total} loss {loss:.4f} ({rate:.2f} steps/s)")

    curve = train_model(model, encoded, settings, progress=train_progress)
    train_seconds = time.perf_counter() - train_started
    report = {
        "schema_version": BASE_SCHEMA_VERSION,
        "kind": "leaguezero_diplomacy_base",
        "prompt_version": PROMPT_VERSION,
        "settings": asdict(settings),
        "parameters": params,
        "examples": {"train": len(train), "held_out": len(held)},
        "tokens_per_example": {"prompt": round(mean_prompt, 1), "answer": round(mean_answer, 1)},
        "loss_curve": curve,
        "validity": None,
        "seconds": {"corpus": round(corpus_seconds, 1), "train": round(train_seconds, 1)},
    }
    # Saved before the check: the check loads the folder back, as every user of it will
    # (and the LoRA wrapping of the check's backend must not reach the saved weights).
    _save(folder, model, tokenizer, report)
    validity = order_validity(load_backend(folder, model_name="base"), held)
    log(
        f"held-out order validity {validity.valid_rate:.3f} ({validity.valid}/{validity.owed}; "
        f"{validity.invalid} invalid, {validity.missing} missing; {validity.exact} answers "
        "equal to the bot's)"
    )
    report["validity"] = {**asdict(validity), "valid_rate": round(validity.valid_rate, 4)}
    report["seconds"]["total"] = round(time.perf_counter() - started, 1)
    atomic_write_json(folder / BASE_META, report)
    log(f"saved {folder} in {report['seconds']['total']:.0f} s")
    return report


def _corpus(
    settings: PretrainSettings, log: Callable[[str], None], last: list[float]
) -> tuple[list[Example], list[Example]]:
    """Play the bot games and split their examples, shuffled, into ``(train, held out)``;
    a progress line at most every 10 s (``last``: when the last one was logged)."""
    log(f"playing {settings.games} bot games ({settings.max_years} years each) ...")

    def game_progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"  games {done}/{total}")

    examples = collect_examples(
        settings.games,
        max_years=settings.max_years,
        seat_bots=settings.seat_bots,
        record_bots=settings.record_bots,
        seed=settings.seed,
        progress=game_progress,
    )
    rng = random.Random(settings.seed)
    rng.shuffle(examples)
    held = examples[: settings.held_out]
    train = examples[settings.held_out :]
    if not train:
        raise ValueError("no training examples: play more games or hold out fewer")
    log(f"{len(examples)} examples ({len(train)} train, {len(held)} held out)")
    return train, held


def _tokenizer_and_model(settings: PretrainSettings, train: list[Example]):
    """A new tokenizer trained on ``train`` and a new model of the settings' shape, or with
    ``settings.init`` an earlier build's own (more training of it: its tokenizer too)."""
    if settings.init is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(settings.init, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(settings.init, local_files_only=True)
        return tokenizer, model
    tokenizer = build_tokenizer(
        [e.prompt + "\n" + e.answer for e in train[:4000]], settings.vocab_size
    )
    model = build_model(
        tokenizer, hidden=settings.hidden, layers=settings.layers, heads=settings.heads
    )
    return tokenizer, model


def _save(folder: Path, model, tokenizer, report: dict[str, Any]) -> None:
    """Model + tokenizer + report into ``folder``, written beside it and renamed into place."""
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / BASE_META, report)


def read_base_meta(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``leaguezero_base.json`` of a base folder built here (None for other models)."""
    path = Path(folder) / BASE_META
    if not path.exists():
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("schema_version") != BASE_SCHEMA_VERSION:
        raise ValueError(
            f"{path} has schema_version {meta.get('schema_version')!r}; this leaguezero reads "
            f"{BASE_SCHEMA_VERSION}"
        )
    return meta
