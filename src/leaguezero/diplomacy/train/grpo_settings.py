"""The GRPO trainer's settings, one frozen value built once where a run starts, and the
per-step schedules of its learning rate and KL weight.

TRL's habit (``GRPOConfig`` → trainer): every knob of the update is a field of
:class:`GRPOSettings`, validated when the value is made, and
:class:`~leaguezero.diplomacy.train.grpo.GRPOTrainer` reads them from it; nothing below the
run's start reads the config's ``train`` section for them again. A run builds it with
:meth:`GRPOSettings.from_config` (``diplomacy train``: :class:`~.loop.LeagueTrainer`; its
exploiters take a copy, :mod:`.exploiters`); a library caller or a test writes the fields it
needs and keeps the defaults of the others (plain GRPO: one epoch, the sequence ratio, no KL,
no sampler correction).

The schedules (:func:`scheduled_lr`, :func:`scheduled_kl_coef`) are functions of the step
only, so a resumed run goes on where it was. The KL weight's warm-up is applied by the trainer
(:meth:`~.grpo.GRPOTrainer.kl_coef_at`): these settings say where it ends (``kl_coef``) and
how many steps it takes to get there.
"""

from __future__ import annotations

import dataclasses
import math

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train.credit import CREDIT_RULES, CREDITS
from leaguezero.diplomacy.train.grpo_loss import AGGREGATIONS, IS_CORRECTIONS, RATIO_KINDS

LR_SCHEDULES = ("constant", "cosine")


def scheduled_lr(lr: float, step: int, steps: int, schedule: str, final: float) -> float:
    """The learning rate of training step ``step`` (1-based) of ``steps``.

    ``constant`` keeps ``lr``; ``cosine`` falls from ``lr`` at step 1 to ``final * lr`` at the
    last step along a half cosine, and stays there past it. The rate is a function of ``step``
    and ``steps`` only: a run resumed with a larger ``steps`` follows the longer schedule (its
    rate goes back up to where that schedule is at the resumed step).
    """
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr schedule must be one of {', '.join(LR_SCHEDULES)}, not {schedule!r}")
    if not 0.0 <= final <= 1.0:
        raise ValueError(f"final lr fraction must be in [0, 1], not {final}")
    if schedule == "constant" or steps <= 1:
        return lr
    progress = min(max(step - 1, 0) / (steps - 1), 1.0)
    return lr * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def scheduled_kl_coef(kl_coef: float, step: int, warmup_steps: int) -> float:
    """The KL coefficient of training step ``step`` (1-based): with ``warmup_steps`` N > 1 it
    rises linearly from 0 at step 1 to ``kl_coef`` at step N and stays there; N of 0 or 1 keeps
    ``kl_coef`` from the first step. A function of the step only, so a resumed run goes on
    where the schedule was."""
    if warmup_steps < 0:
        raise ValueError(f"KL warm-up steps must be >= 0, not {warmup_steps}")
    if warmup_steps <= 1 or step >= warmup_steps:
        return kl_coef
    return kl_coef * max(step - 1, 0) / (warmup_steps - 1)


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
    """What one GRPO update does (the ``train`` section's fields of the same names; :mod:`.grpo`
    and :mod:`.grpo_loss` say what each means). Raises ``ValueError`` for a value out of range.
    """

    lr: float = 1e-3  # Adam's learning rate when the trainer is made (a schedule sets it later)
    clip_eps: float = 0.2  # PPO's ratio clip: ratios kept in 1 +- clip_eps
    epsilon_high: float | None = None  # clip-higher's upper bound (None: clip_eps)
    kl_coef: float = 0.0  # weight of the KL to the frozen reference (0: no KL term)
    kl_warmup_steps: int = 0  # N > 1: the KL weight rises from 0 at step 1 to kl_coef at step N
    epochs: int = 1  # gradient passes over a step's records
    max_grad_norm: float = 1.0
    adv_eps: float = 1e-6  # added to the group's std before dividing by it
    credit: str = "game"  # a record's advantage: the game's score or the score from its phase
    records_per_pass: int | None = None  # records one backward pass holds (None: all at once)
    # RSS (GB) above which freed memory goes back to the system after a backward pass (None:
    # never): glibc keeps a pass's freed activations, and the next record, longer, may not fit
    # in what it kept (an LLM hero: its memory plan's budget less one record).
    trim_above_gb: float | None = None
    max_records: int | None = None  # the most records a step trains on (None: all)
    ratio: str = "sequence_sum"
    aggregation: str = "grpo"
    token_budget: int = 1  # the most tokens a record may have (dr_grpo's constant)
    mask_truncated: bool = False  # answers cut at the token budget leave the loss (DAPO)
    is_correction: str = "none"  # the sampler/trainer mismatch correction
    is_cap: float = 2.0  # the cap of the sampler weight
    value_coef: float = 0.5  # the value head's MSE weight (a policy network with a value head)

    def __post_init__(self) -> None:
        if self.credit not in CREDIT_RULES:
            raise ValueError(f"credit must be one of {', '.join(CREDITS)}, not {self.credit!r}")
        for name, value, allowed in (
            ("ratio", self.ratio, RATIO_KINDS),
            ("aggregation", self.aggregation, AGGREGATIONS),
            ("is_correction", self.is_correction, IS_CORRECTIONS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        if not self.is_cap > 1.0:
            raise ValueError(f"is_cap must be > 1, not {self.is_cap}")
        for name in ("records_per_pass", "max_records"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, not {value}")
        if self.kl_warmup_steps < 0:
            raise ValueError(f"KL warm-up steps must be >= 0, not {self.kl_warmup_steps}")
        if not self.value_coef >= 0:
            raise ValueError(f"value_coef must be >= 0, not {self.value_coef}")

    @classmethod
    def from_config(
        cls,
        cfg: DiplomacyConfig,
        *,
        records_per_pass: int | None = None,
        trim_above_gb: float | None = None,
    ) -> GRPOSettings:
        """The settings of a run of ``cfg`` (its ``train`` section; ``llm.max_new_tokens`` is
        an LLM hero's token budget, a network's records are one token each).
        ``records_per_pass``: what ``train.records_per_pass: 0`` (auto) means for this hero
        (:attr:`~.heroes.Hero.records_per_pass`; None: a step's records in one pass);
        ``trim_above_gb``: the hero's (:attr:`~.heroes.Hero.trim_above_gb`)."""
        train = cfg.train
        return cls(
            lr=train.lr,
            clip_eps=train.clip_eps,
            epsilon_high=train.epsilon_high,
            kl_coef=train.kl_coef,
            kl_warmup_steps=train.kl_warmup_steps,
            epochs=train.epochs,
            max_grad_norm=train.max_grad_norm,
            credit=train.credit,
            records_per_pass=train.records_per_pass or records_per_pass,
            trim_above_gb=trim_above_gb,
            max_records=train.max_records or None,
            ratio=train.ratio,
            aggregation=train.loss_aggregation,
            token_budget=cfg.llm.max_new_tokens if train.hero.llm else 1,
            mask_truncated=train.mask_truncated,
            is_correction=train.is_correction,
            is_cap=train.is_cap,
            value_coef=train.value_coef,
        )
