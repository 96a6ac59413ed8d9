"""Imitation first for the LLM hero: a LoRA adapter trained on a teacher's orders
(``leaguezero llm imitate``).

The policy hero beat DumbBot only after it first imitated a strong reference
(:mod:`leaguezero.diplomacy.train.imitation`); GRPO from the base LM alone, in a few hundred
CPU steps, moved it against random bots but not against ``dumb_bot``. The LLM hero gets the
same first stage, as an *adapter*, so the base model stays the one every run and evaluation
compares against:

1. **Corpus**: games seated from ``seats`` (bots, ``pretrained`` or any agent the command line
   accepts), as :func:`~.corpus.collect_examples` plays them; every phase of every seat the
   ``teacher`` plays becomes one (prompt, orders) example, the prompt exactly as the league
   loop shows it. The default teacher is the shipped policy hero (``pretrained``, greedy) in
   games against ``dumb_bot``: the positions the LLM hero will meet, and the moves that beat
   them.
2. **Adapter**: a fresh LoRA adapter of the shape a GRPO run continues (``llm.lora_rank``,
   ``llm.lora_alpha``, ``llm.target_modules``) on the frozen base, trained on the answer tokens
   only by :func:`~.training.train_model` (the same loop that built the base).
3. **Output**, saved as soon as training ends: a normal adapter folder
   (``HFBackend.save_adapter``: ``llm serve``, vLLM and ``diplomacy train --init-from`` take
   it) with ``lineage.json`` (the chain a GRPO run carries on: teacher, games, settings,
   command) and ``imitation.json`` (the report).
4. **Check**, for the base and the adapter, on held-out examples: the teacher's answers' loss
   per token (:func:`answer_nll`) and greedy free generation
   (:func:`~.validity.order_validity`: the share of owed orders that are legal, the answers
   equal to the teacher's), bounded in tokens per answer and in time (a real base that was
   never taught the format writes to the token budget every time); the report is written
   again with it. A run stopped during the check keeps its adapter.

Sizes: a base built here (about a million parameters) trains on batches of 6,144 tokens at
2e-3; a real pretrained model (SmolLM2-135M: ~20 CPU-s a step of 1,100 tokens) on batches of
1,024 tokens at 5e-4, and every run stops training after ``max_minutes`` (default 40), so a
run with the defaults ends within an hour on two cores (docs/guides/llm.md, "A real model on a
CPU").
"""

from __future__ import annotations

import os
import random
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from leaguezero.common.atomic import atomic_write_json
from leaguezero.diplomacy.llm.base.corpus import collect_examples
from leaguezero.diplomacy.llm.base.lm import encode_example
from leaguezero.diplomacy.llm.base.settings import PretrainSettings
from leaguezero.diplomacy.llm.base.training import train_model
from leaguezero.diplomacy.llm.base.validity import order_validity
from leaguezero.diplomacy.llm.orders.prompt import ChatFormat

REPORT_FILE = "imitation.json"
REPORT_VERSION = 2  # 2: the check may be partial (prompts checked), saved before it
SMALL_BASE = 10_000_000  # parameters: below, a base built by `llm pretrain`


@dataclass
class AdapterImitationSettings:
    """Everything that decides the adapter (stored in ``imitation.json`` and the lineage)."""

    teacher: str = "pretrained"
    seats: tuple[str, ...] = ("pretrained", "dumb_bot")
    games: int = 300
    max_years: int = 3
    steps: int = 500
    batch_tokens: int = 0  # 0: by the base's size (SMALL_BASE: 6,144 tokens, else 1,024)
    lr: float = 0.0  # 0: by the base's size (SMALL_BASE: 2e-3, else 5e-4)
    warmup: int = 50
    lora_rank: int = 16
    lora_alpha: float = 32.0
    target_modules: tuple[str, ...] | str = "auto"
    held_out: int = 200
    seed: int = 0
    threads: int = 1
    name: str = "hero-v0000"
    max_minutes: float = 40.0  # training stops after this much time (0: only at --steps)
    check_tokens: int = 96  # the held-out check's answer budget (a legal answer is ~10-60)
    check_minutes: float = 5.0  # the held-out check's time budget, base and adapter each
    system_prompt: str | None = None  # llm.system_prompt of the runs that use the adapter

    def sized_for(self, parameters: int) -> AdapterImitationSettings:
        """The settings with ``batch_tokens`` and ``lr`` of 0 chosen by the base's size."""
        small = parameters < SMALL_BASE
        return replace(
            self,
            batch_tokens=self.batch_tokens or (6144 if small else 1024),
            lr=self.lr or (2e-3 if small else 5e-4),
        )

    def command(self, base_model: str | os.PathLike, out: str | os.PathLike) -> str:
        """The command line that makes this adapter again."""
        targets = (
            self.target_modules
            if isinstance(self.target_modules, str)
            else ",".join(self.target_modules)
        )
        parts = [
            "leaguezero llm imitate",
            f"--base-model {shlex.quote(str(base_model))}",
            f"--out {shlex.quote(str(out))}",
            f"--teacher {self.teacher}",
            f"--seats {','.join(self.seats)}",
            f"--games {self.games}",
            f"--max-years {self.max_years}",
            f"--steps {self.steps}",
            f"--batch-tokens {self.batch_tokens}",
            f"--lr {self.lr:g}",
            f"--lora-rank {self.lora_rank}",
            f"--lora-alpha {self.lora_alpha:g}",
            f"--target-modules {targets}",
            f"--held-out {self.held_out}",
            f"--seed {self.seed}",
            f"--threads {self.threads}",
            f"--max-minutes {self.max_minutes:g}",
            f"--check-tokens {self.check_tokens}",
            f"--check-minutes {self.check_minutes:g}",
        ]
        if self.system_prompt is not None:
            parts.append(f"--system-prompt {shlex.quote(self.system_prompt)}")
        return " ".join(parts)


def imitate(
    base_model: str | os.PathLike,
    out: str | os.PathLike,
    settings: AdapterImitationSettings,
    *,
    resolver=None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train the adapter into ``out`` (see module doc) and return its report.

    ``resolver``: builds the non-bot agents of ``settings.seats`` (the command's resolver,
    :func:`~leaguezero.diplomacy.agents.resolvers.command_resolver`); None when all are bots.
    """
    from leaguezero.diplomacy.llm.model.hf_backend import LoraSettings
    from leaguezero.diplomacy.llm.runtime import load_backend

    folder = Path(out)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; choose another --out")
    if settings.teacher not in settings.seats:
        raise ValueError(f"teacher {settings.teacher!r} is not among the seats {settings.seats}")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    started = time.perf_counter()
    every = _Throttled(log)
    held, train = _corpus(settings, resolver, log, every)
    corpus_seconds = time.perf_counter() - started
    targets = settings.target_modules
    lora = LoraSettings(
        rank=settings.lora_rank,
        alpha=settings.lora_alpha,
        target_modules=targets if isinstance(targets, str) else list(targets),
        max_lora_rank=max(16, settings.lora_rank),
    )
    backend = load_backend(base_model, lora=lora, model_name="base")
    settings = settings.sized_for(sum(p.numel() for p in backend.model.parameters()))
    render = ChatFormat(settings.system_prompt).renderer(backend.tokenizer)
    backend.add_adapter(settings.name)
    trainable = sum(p.numel() for p in backend.trainable_parameters(settings.name))
    encoded = [encode_example(backend.tokenizer, e, render) for e in train]
    log(
        f"adapter {settings.name}: {trainable} trainable parameters; {settings.steps} steps of "
        f"~{settings.batch_tokens} tokens at lr {settings.lr:g}"
        + (f", at most {settings.max_minutes:g} minutes" if settings.max_minutes else "")
    )
    train_started = time.perf_counter()
    curve = _train(backend, settings, encoded, every)
    train_seconds = time.perf_counter() - train_started
    steps_done = curve[-1]["step"] if curve else 0
    if steps_done < settings.steps:
        log(f"  stopped at step {steps_done} of {settings.steps}: --max-minutes reached")
    report = {
        "schema_version": REPORT_VERSION,
        "kind": "leaguezero_adapter_imitation",
        "base_model": str(Path(base_model).resolve()),
        "settings": asdict(settings),
        "command": settings.command(base_model, out),
        "trainable_parameters": trainable,
        "steps_done": steps_done,
        "examples": {"train": len(train), "held_out": len(held)},
        "loss_curve": curve,
        "held_out": None,  # the check runs after the adapter is saved
        "seconds": {"corpus": round(corpus_seconds, 1), "train": round(train_seconds, 1)},
    }
    # Saved before the check: a run stopped while checking keeps what it trained.
    backend.save_adapter(settings.name, folder)
    # Beside the adapter's own files (adapter_files reads only its fixed names): the chain a
    # GRPO run started from this folder carries on (train/lineage.py), and the report.
    atomic_write_json(folder / "lineage.json", {"step": 0, "lineage": [_lineage_entry(report)]})
    atomic_write_json(folder / REPORT_FILE, report)
    log(f"saved {folder}; checking {len(held)} held-out examples (base, then adapter) ...")
    check_started = time.perf_counter()
    report["held_out"] = _held_out(backend, held, render, settings, log)
    report["seconds"]["check"] = round(time.perf_counter() - check_started, 1)
    report["seconds"]["total"] = round(time.perf_counter() - started, 1)
    atomic_write_json(folder / REPORT_FILE, report)
    log(f"done in {report['seconds']['total']:.0f} s")
    return report


def _train(backend, settings: AdapterImitationSettings, encoded, every) -> list[dict]:
    """Train the adapter on the encoded examples (progress every 15 s); the loss curve."""
    train_settings = PretrainSettings(
        steps=settings.steps,
        batch_tokens=settings.batch_tokens,
        lr=settings.lr,
        warmup=settings.warmup,
        weight_decay=0.0,
        seed=settings.seed,
    )
    train_started = time.perf_counter()

    def progress(step: int, total: int, loss: float) -> None:
        elapsed = time.perf_counter() - train_started
        rate = step / max(1e-9, elapsed)
        every(
            15,
            lambda: (
                f"  step {step}/{total} loss {loss:.4f} ({rate:.2f} steps/s, "
                f"{elapsed / 60:.1f} min)"
            ),
            step == total,
        )

    with backend.training(settings.name) as model:
        return train_model(
            model,
            encoded,
            train_settings,
            progress=progress,
            max_seconds=settings.max_minutes * 60 if settings.max_minutes else None,
        )


class _Throttled:
    """``every(seconds, line, final)``: log ``line()`` at most every ``seconds``, and at the end."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log, self.last = log, 0.0

    def __call__(self, seconds: float, line: Callable[[], str], final: bool) -> None:
        if time.perf_counter() - self.last > seconds or final:
            self.last = time.perf_counter()
            self.log(line())


def _corpus(settings: AdapterImitationSettings, resolver, log, every) -> tuple[list, list]:
    """The teacher's examples from ``settings.games`` games, shuffled: ``(held out, train)``."""
    log(f"playing {settings.games} games ({settings.max_years} years; seats {settings.seats}) ...")
    examples = collect_examples(
        settings.games,
        max_years=settings.max_years,
        seat_bots=settings.seats,
        record_bots=(settings.teacher,),
        seed=settings.seed,
        resolver=resolver,
        progress=lambda d, t: every(10, lambda: f"  games {d}/{t}", d == t),
    )
    random.Random(settings.seed).shuffle(examples)
    held, train = examples[: settings.held_out], examples[settings.held_out :]
    if not train:
        raise ValueError("no training examples: play more games or hold out fewer")
    log(
        f"{len(examples)} examples of {settings.teacher} ({len(train)} train, {len(held)} held out)"
    )
    return held, train


def _lineage_entry(report: dict[str, Any]) -> dict[str, Any]:
    """The imitation stage as a lineage entry, which a GRPO run started from the folder carries
    on (:mod:`leaguezero.diplomacy.train.lineage`)."""
    settings = report["settings"]
    return {
        "imitation": {
            "teacher": settings["teacher"],
            "seats": list(settings["seats"]),
            "games": settings["games"],
            "steps": report["steps_done"],
            "command": report["command"],
            "base_model": report["base_model"],
            "system_prompt": settings["system_prompt"],
        },
        "step": 0,
    }


def _held_out(backend, held, render, settings: AdapterImitationSettings, log) -> dict:
    """The held-out check of the base and of the adapter, each logged in one line."""
    found = {
        "base": _check(backend, held, None, render, settings),
        "adapter": _check(backend, held, settings.name, render, settings),
    }
    for who, entry in found.items():
        log(
            f"held-out, {who}: answer loss {entry['answer_nll']:.4f} per token; "
            f"{entry['valid_rate']:.3f} of owed orders legal ({entry['invalid']} invalid, "
            f"{entry['missing']} missing); {entry['exact']}/{entry['prompts']} answers equal to "
            "the teacher's"
        )
    return found


def _check(backend, held, adapter: str | None, render, settings: AdapterImitationSettings) -> dict:
    """Answer loss and greedy validity on the held-out examples, bounded by
    ``settings.check_tokens`` per answer and ``settings.check_minutes`` (half for each)."""
    half = settings.check_minutes * 30
    nll = answer_nll(backend, held, adapter, render=render, deadline=time.monotonic() + half)
    deadline = time.monotonic() + half
    validity = order_validity(
        backend,
        held,
        adapter=adapter,
        max_new_tokens=settings.check_tokens,
        render=render,
        deadline=deadline,
    )
    return {**_validity_dict(validity), "answer_nll": round(nll, 5)}


def answer_nll(
    backend, examples, adapter: str | None, batch: int = 16, render=None, deadline=None
) -> float:
    """Mean negative log-likelihood per token of the teacher's answers (END and EOS included)
    under ``adapter`` (None: the base), free decoding's distribution (no constraint);
    ``render``: the chat format (default: the template, no system turn); ``deadline``: a
    ``time.monotonic()`` after which no new batch starts (at least one batch is scored)."""
    from leaguezero.diplomacy.llm.orders.prompt import render_prompt

    render = render or (lambda text: render_prompt(backend.tokenizer, text))
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), batch):
            if start and deadline is not None and time.monotonic() > deadline:
                break
            chunk = examples[start : start + batch]
            prompts = [render(e.prompt) for e in chunk]
            answers = [encode_example(backend.tokenizer, e, render)[1] for e in chunk]
            for row in backend.logprobs(prompts, answers, adapter):
                total -= float(row.sum())
                tokens += row.numel()
    return total / max(1, tokens)


def _validity_dict(v) -> dict[str, Any]:
    return {**asdict(v), "valid_rate": round(v.valid_rate, 4)}


def seat_names(text: str) -> tuple[str, ...]:
    """``"pretrained,dumb_bot"`` -> ``("pretrained", "dumb_bot")``."""
    return tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
