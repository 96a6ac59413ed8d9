"""A base LM that plays Diplomacy, built here from bot games (``leaguezero llm pretrain``).

No weights are downloaded anywhere in leaguezero, so the LLM league needs a base model it can
build itself. This module makes one in minutes on a CPU:

1. **Corpus** (:func:`collect_examples`): games of the built-in bots (each seat drawn from
   ``seat_bots``, 3-year games by default); every phase of every *recorded* seat (``record_bots``)
   becomes one example: the prompt the league loop shows
   (:func:`~leaguezero.diplomacy.llm.orders.prompt.build_prompt`) and the bot's orders as the
   answer, one per line in the prompt's location order, then ``END``. Recording greedy_bot and
   chaos_bot gives a base that plays a *mixture* of a strong and a wild style: legal, better than
   random, and with room for GRPO to sharpen it.
2. **Tokenizer** (:func:`build_tokenizer`): byte-level BPE trained with ``tokenizers`` on the
   corpus (province names become single tokens), with a chat template (``<|user|>`` /
   ``<|assistant|>``) that the loop applies like any chat model's.
3. **Model** (:func:`build_model`): a Llama-shaped causal LM from a config (no weights to load).
4. **Training** (:func:`train_model`): supervised next-token loss on the answer tokens only,
   length-bucketed batches, AdamW with warm-up and cosine decay; bfloat16 autocast where the CPU
   has native bf16 matmuls.
5. **Check** (:func:`order_validity`): greedy answers to held-out prompts parsed with
   :func:`~leaguezero.diplomacy.llm.orders.prompt.extract_orders`; the share of owed orders that are
   legal.

The output folder is a normal Hugging Face folder (``save_pretrained`` of model and tokenizer)
plus ``leaguezero_base.json`` (schema version, prompt version, corpus and training figures), so
every ``--base-model`` / ``llm.base_model`` option takes it, as it would take Qwen or Llama.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.common.hardware import cpu_has_native_bf16
from leaguezero.diplomacy.llm.orders.prompt import (
    END_MARK,
    PROMPT_VERSION,
    build_prompt,
    extract_orders,
    render_prompt,
)

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.env import DiplomacyEnv
    from leaguezero.diplomacy.game.phase import SeatOrders
    from leaguezero.diplomacy.game.seats import Policy

BASE_META = "leaguezero_base.json"
BASE_SCHEMA_VERSION = 1
EOS = "<|eos|>"
USER, ASSISTANT = "<|user|>", "<|assistant|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass
class PretrainSettings:
    """Everything that decides the base model (stored in ``leaguezero_base.json``)."""

    games: int = 300
    max_years: int = 4
    seat_bots: tuple[str, ...] = ("greedy_bot", "chaos_bot", "random_bot")
    record_bots: tuple[str, ...] = ("greedy_bot", "chaos_bot")
    vocab_size: int = 1024
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    steps: int = 1500
    batch_tokens: int = 6144
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    held_out: int = 200
    seed: int = 0
    threads: int = 0  # 0: torch's default
    init: str | None = None  # continue from this base folder (its tokenizer and weights)
    # Weight of the prompt tokens' next-token loss beside the answer's (weight 1; 0: answers
    # only). Measured once: 900 more steps at 1.0 lowered held-out validity from 0.46 to 0.36
    # (the answer's share of the gradient shrinks); kept as an option, off by default.
    prompt_loss: float = 0.0


@dataclass
class Example:
    """One (prompt -> answer) pair: the phase's prompt and the bot's orders."""

    prompt: str
    answer: str
    bot: str
    phase_type: str
    legal: dict[str, list[str]] = field(repr=False)
    owed: int | None = None


def answer_text(orders: Sequence[str], legal: dict[str, list[str]]) -> str:
    """Orders one per line in the prompt's (sorted) location order, numbered as the prompt
    numbers its locations (``2) A PAR - BUR``), then ``END``. Builds and disbands, which are
    fewer than the sites listed, are numbered 1, 2, ... in site order."""
    rank = {}
    for i, loc in enumerate(sorted(legal)):
        for option in legal[loc]:
            rank.setdefault(option, i)
    ordered = sorted(orders, key=lambda o: (rank.get(o, len(rank)), o))
    if len(ordered) == len(legal) and all(o in rank for o in ordered):
        numbers = [rank[o] + 1 for o in ordered]  # one order per listed location
    else:
        numbers = list(range(1, len(ordered) + 1))
    lines = [f"{n}) {order}" for n, order in zip(numbers, ordered, strict=True)]
    return "\n".join([*lines, END_MARK])


def collect_examples(
    games: int,
    *,
    max_years: int = 3,
    seat_bots: Sequence[str] = ("greedy_bot", "chaos_bot", "random_bot"),
    record_bots: Sequence[str] = ("greedy_bot", "chaos_bot"),
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    resolver=None,
) -> list[Example]:
    """Play ``games`` games and return the recorded seats' (prompt, answer) pairs.

    ``seat_bots``/``record_bots``: agent names as the command line gives them (parsed once
    here, :func:`~leaguezero.diplomacy.game.catalogue.parse_agents`); bots unless ``resolver``
    (an :data:`~leaguezero.diplomacy.game.seats.AgentResolver`) builds the others.
    """
    from leaguezero.diplomacy.game.catalogue import parse_agents
    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.game.seats import resolve_agent

    agents = dict(zip(seat_bots, parse_agents(seat_bots), strict=True))
    rng = random.Random(seed)
    examples: list[Example] = []
    for g in range(games):
        seats = {p: rng.choice(list(seat_bots)) for p in POWERS}
        bots = {p: resolve_agent(agents[seats[p]], rng.getrandbits(32), resolver) for p in POWERS}
        env = DiplomacyEnv(max_years=max_years)
        examples.extend(_game_examples(env, seats, bots, record_bots))
        if progress is not None:
            progress(g + 1, games)
    return examples


def _game_examples(
    env: DiplomacyEnv, seats: dict[str, str], bots: dict[str, Policy], record_bots: Sequence[str]
) -> list[Example]:
    """Play ``env`` to its end, ``bots`` at the seats; the examples of the seats whose agent
    (``seats``: {power: name}) is in ``record_bots``, in the order they were played."""
    from leaguezero.diplomacy.game.phase import play_phase

    examples: list[Example] = []

    def record(seat: SeatOrders) -> None:
        if seats[seat.power] in record_bots:
            owed = abs(env.adjustment_count(seat.power)) if env.phase_type == "A" else None
            examples.append(
                Example(
                    build_prompt(env, seat.power, seat.legal),
                    answer_text(seat.submitted, seat.legal),
                    seats[seat.power],
                    env.phase_type,
                    seat.legal,
                    owed,
                )
            )

    while not env.done:
        play_phase(env, lambda power, _legal: bots[power].get_orders(env, power), record)
    return examples


def build_tokenizer(texts: Sequence[str], vocab_size: int = 1024):
    """Byte-level BPE (any text encodes) trained on ``texts``, with EOS/pad and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, USER, ASSISTANT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, *, hidden: int, layers: int, heads: int, max_positions: int = 4096):
    """A randomly initialised Llama-shaped causal LM for ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    return LlamaForCausalLM(config)


def encode_example(
    tokenizer, example: Example, render: Callable[[str], str] | None = None
) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids + EOS), tokenised as generation sees them; ``render``: the chat
    format (default: the tokenizer's template, no system turn)."""
    text = (
        render(example.prompt) if render is not None else render_prompt(tokenizer, example.prompt)
    )
    prompt_ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    answer_ids = tokenizer(example.answer, add_special_tokens=False)["input_ids"]
    return list(prompt_ids), [*answer_ids, tokenizer.eos_token_id]


def _batches(lengths: Sequence[int], batch_tokens: int, rng: np.random.Generator):
    """Index batches of similar lengths, about ``batch_tokens`` padded tokens each, shuffled."""
    order = np.argsort(np.asarray(lengths) + rng.uniform(0, 8, len(lengths)))
    batches, current, width = [], [], 0
    for i in order:
        width_if = max(width, lengths[i])
        if current and width_if * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, width_if = [], lengths[i]
        current.append(int(i))
        width = width_if
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def train_model(
    model,
    encoded: Sequence[tuple[list[int], list[int]]],
    settings: PretrainSettings,
    *,
    progress: Callable[[int, int, float], None] | None = None,
    max_seconds: float | None = None,
) -> list[dict[str, float]]:
    """Supervised training on the answer tokens; returns the loss curve (every 50 steps).

    With ``settings.prompt_loss == 0`` (the default) rows are left-padded so every answer ends
    at the right edge and the model computes the logits of the answer positions only
    (``logits_to_keep``): a real model's head over a 49k-152k vocabulary at every prompt
    position would be most of the memory and a fifth of the compute. ``max_seconds``: stop
    after the step that passes this much training time (the curve says how far it got).
    """
    rng = np.random.default_rng(settings.seed)
    lengths = [len(p) + len(a) for p, a in encoded]
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95)
    )

    def lr_at(step: int) -> float:
        if step < settings.warmup:
            return settings.lr * (step + 1) / settings.warmup
        frac = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
        return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    autocast = cpu_has_native_bf16()
    pad = model.config.pad_token_id
    if pad is None:
        pad = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else 0
    answers_only = settings.prompt_loss == 0
    model.train()
    curve: list[dict[str, float]] = []
    step, window, window_tokens = 0, 0.0, 0
    started = time.perf_counter()
    while step < settings.steps:
        for batch in _batches(lengths, settings.batch_tokens, rng):
            if step >= settings.steps:
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            rows = [encoded[i] for i in batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                if answers_only:
                    loss = _answer_loss(model, rows, pad)
                else:
                    loss = _sequence_loss(model, rows, pad, settings.prompt_loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            window += float(loss.detach())
            window_tokens += 1
            out_of_time = max_seconds is not None and time.perf_counter() - started > max_seconds
            if step % 50 == 0 or step == settings.steps or out_of_time:
                curve.append(
                    {
                        "step": step,
                        "loss": round(window / window_tokens, 5),
                        "seconds": round(time.perf_counter() - started, 1),
                    }
                )
                window, window_tokens = 0.0, 0
            if progress is not None:
                progress(step, settings.steps, float(loss.detach()))
            if out_of_time:
                model.eval()
                return curve
    model.eval()
    return curve


def _answer_loss(model, rows: Sequence[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """Mean next-token loss over the answers' tokens, from the answer positions' logits only
    (rows left-padded; positions counted from each row's first real token)."""
    width = max(len(p) + len(a) for p, a in rows)
    answer = max(len(a) for _, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    targets = torch.full((len(rows), answer), -100, dtype=torch.long)
    for b, (p, a) in enumerate(rows):
        ids[b, width - len(p) - len(a) :] = torch.tensor(p + a)
        mask[b, width - len(p) - len(a) :] = 1
        targets[b, answer - len(a) :] = torch.tensor(a)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=answer + 1
    ).logits[:, :-1]  # [B, answer, V]: column j predicts the answer's token j
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )


def _sequence_loss(
    model, rows: Sequence[tuple[list[int], list[int]]], pad: int, prompt_weight: float
) -> torch.Tensor:
    """Weighted next-token loss over every position (answers weight 1, prompts
    ``prompt_weight``): the full ``[B, L, V]`` logits."""
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    weights = torch.zeros((len(rows), width), dtype=torch.float32)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (p, a) in enumerate(rows):
        ids[b, : len(p) + len(a)] = torch.tensor(p + a)
        weights[b, 1 : len(p)] = prompt_weight  # token 0 has no prediction
        weights[b, len(p) : len(p) + len(a)] = 1.0
        mask[b, : len(p) + len(a)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits
    # Token t is predicted at position t - 1; weighted mean over the tokens that count.
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        ids[:, 1:].reshape(-1),
        reduction="none",
    ).view(len(rows), width - 1)
    w = weights[:, 1:]
    return (nll * w).sum() / w.sum().clamp(min=1e-9)


@dataclass
class Validity:
    """Greedy answers to held-out prompts, parsed as the league loop parses them."""

    prompts: int
    owed: int  # orders the prompts asked for (orderable locations; builds/disbands owed)
    valid: int  # legal orders given
    invalid: int  # order-like lines that were not legal (or a location twice)
    missing: int  # owed orders not given
    exact: int  # answers equal to the bot's

    @property
    def valid_rate(self) -> float:
        """Legal orders given / orders owed (invalid and missing both count against it)."""
        return self.valid / max(1, self.owed)


def order_validity(
    backend,
    examples: Sequence[Example],
    *,
    max_new_tokens: int = 160,
    batch: int = 16,
    adapter: str | None = None,
    render: Callable[[str], str] | None = None,
    deadline: float | None = None,
) -> Validity:
    """Greedy-decode every example's prompt on ``backend`` (an HFBackend; with ``adapter``,
    or the base model) and parse it. ``render``: the chat format (default: the tokenizer's
    template, no system turn); ``deadline``: a ``time.monotonic()`` after which no new batch
    starts (``prompts`` then counts the examples checked)."""
    tokenizer = backend.tokenizer
    render = render or (lambda text: render_prompt(tokenizer, text))
    result = Validity(0, 0, 0, 0, 0, 0)
    for start in range(0, len(examples), batch):
        if deadline is not None and time.monotonic() > deadline:
            break
        chunk = examples[start : start + batch]
        result.prompts += len(chunk)
        prompts = [render(e.prompt) for e in chunk]
        completions = backend.generate(prompts, [adapter] * len(chunk), max_new_tokens, 0.0, 0)
        for example, completion in zip(chunk, completions, strict=True):
            parsed = extract_orders(
                completion.text, example.legal, example.phase_type, example.owed
            )
            owed = len(parsed.parsed) + parsed.missing
            result.owed += owed
            result.valid += len(parsed.parsed)
            result.invalid += parsed.invalid
            result.missing += parsed.missing
            result.exact += completion.text.strip() == example.answer.strip()
    return result


def pretrain(
    out: str | os.PathLike,
    settings: PretrainSettings,
    *,
    log: Callable[[str], None] = print,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build the base model into ``out`` (see module doc) and return its report."""
    from leaguezero.diplomacy.llm.runtime import load_backend

    folder = Path(out)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise FileExistsError(f"{folder} exists and is not empty; choose another --out")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    started = time.perf_counter()
    log(f"playing {settings.games} bot games ({settings.max_years} years each) ...")
    last = [0.0]

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
    corpus_seconds = time.perf_counter() - started
    rng = random.Random(settings.seed)
    rng.shuffle(examples)
    held = examples[: settings.held_out]
    train = examples[settings.held_out :]
    if not train:
        raise ValueError("no training examples: play more games or hold out fewer")
    log(f"{len(examples)} examples ({len(train)} train, {len(held)} held out)")
    if settings.init is not None:  # more training of an earlier build: its tokenizer too
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(settings.init, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(settings.init, local_files_only=True)
    else:
        tokenizer = build_tokenizer(
            [e.prompt + "\n" + e.answer for e in train[:4000]], settings.vocab_size
        )
        model = build_model(
            tokenizer, hidden=settings.hidden, layers=settings.layers, heads=settings.heads
        )
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
    backend = load_backend(folder, model_name="base")
    validity = order_validity(backend, held)
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
