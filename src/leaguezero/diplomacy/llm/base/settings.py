"""The settings of ``leaguezero llm pretrain``: everything that decides the base model it builds
(:func:`~leaguezero.diplomacy.llm.base.pretrain.pretrain`), stored with the model."""

from __future__ import annotations

from dataclasses import dataclass


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
