"""GRPO for a Diplomacy hero: the trainable-policy interface and the clipped group update.

**The interface** (:class:`GRPOPolicy`) is what both hero kinds implement: the small CPU policy
network (:mod:`leaguezero.diplomacy.agents.policy`) and the LLM agent, one LoRA adapter trained
for every power it plays (:mod:`leaguezero.diplomacy.llm`). A game seat is played by an *actor*
(:meth:`GRPOPolicy.actor`): an object with the rollout's ``get_orders(env, power)`` that also
appends one :class:`ActionRecord` per sampled action piece to ``actor.records`` (one unit's
order for the network; one completion for the LLM), holding the log-probability under the
sampling weights and whatever the policy needs to recompute it later. A *learning seat* is a
power whose records train: the hero power, and with ``train.learn_from: live_seats`` also every
mirror seat the live weights played (each with its own score; see ``train/loop.py``).

**The update** (:func:`grpo_loss`, :class:`GRPOTrainer`): a step plays a group of G games with
the same opponents and seating and different seeds; each game is one :class:`PlayedGame`, the
record that goes from the rollout to the loss, and the trainer gets one group of G games per
learning seat (each game read at that seat, :attr:`PlayedGame.seat`). With ``credit="game"``
each game's advantage is the seat's final score (docs/reference/design.md#training-score) normalised
within its group,
``A_g = (s_g - mean(s)) / (std(s) + eps)`` (population std), and every record of game g gets
``A_g``. With ``credit="phase"`` (:func:`.credit.phase_advantages`) a record of phase t gets
only the score gained from t on, ``final_g - start_gt``, less that phase's mean over the group and
scaled by the residuals' RMS: a late order is no longer credited with the centres the seat
won before it was given. The loss is PPO's clipped surrogate on the per-record ratio
``r = exp(log_prob_new - log_prob_old)``::

    L_pg = -mean_g mean_{i in g} min(r_i A_gi, clip(r_i, 1 - eps, 1 + eps) A_gi)

plus ``kl_coef`` times the k3 estimator of KL(pi || pi_ref) to a frozen reference (the initial
policy), ``exp(ref - new) - (ref - new) - 1`` per record (:func:`scheduled_kl_coef`: the
coefficient may warm up from 0 over the first steps). Averaging per game first keeps a long
game (many units) from outweighing a short one in its group. That is the ``sequence_sum``
ratio with ``grpo`` aggregation; the other ratio kinds (per token, length mean), the
clip-higher bound, the ``dapo``/``dr_grpo`` aggregations and the sampler's importance weight
live in :mod:`.grpo_loss`. ``dr_grpo`` also leaves the advantages unscaled (``A_g = s_g -
mean(s)``, Dr. GRPO: dividing by the group's std up-weights groups whose games barely differ).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from leaguezero.diplomacy.game.records import ActionRecord, Actor, PlayedGame
from leaguezero.diplomacy.train.credit import CREDIT_RULES, CREDITS
from leaguezero.diplomacy.train.grpo_loss import (
    AGGREGATIONS,
    IS_CORRECTIONS,
    RATIO_KINDS,
    grpo_loss,
    importance_weights,
    padded_rows,
    stack_rows,
    token_mask,
    token_rows,
    token_weights,
)

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


@runtime_checkable
class GRPOPolicy(Protocol):
    """A hero the GRPO trainer can update: the small network or the LLM with LoRA adapters."""

    #: True when sampled log-probs come from another forward pass than :meth:`log_prob` (a
    #: KV-cache loop, a server's kernels): the trainer recomputes the old log-probs before its
    #: first epoch. False when the sampler's log-probs are the trainer's own.
    recompute_old_log_probs: bool

    def record_size(self, record: ActionRecord) -> int:
        """A record's rough cost to recompute: gradient-accumulation passes group records of
        similar size (a constant keeps the sampling order)."""
        ...

    def actor(self, *, seed: int, temperature: float = 1.0, greedy: bool = False) -> Actor:
        """A fresh seat player with its own seeded sampler (``greedy``: argmax, for evaluation)."""
        ...

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` float32 log pi(action) of each record under the current weights, differentiable
        with respect to :meth:`trainable_parameters` (the hero's parameters only)."""
        ...

    def token_log_probs(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Each record's per-token log-probs, ``[record.tokens]`` float32 each (their sum is
        :meth:`log_prob`'s), differentiable like it: what the token-level ratio needs (one-token
        rows for a policy whose records are one choice each)."""
        ...

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters GRPO updates (network weights; the hero's LoRA adapter)."""
        ...

    def save(self, path: str | Path) -> Path:
        """Write a versioned checkpoint atomically; returns the path written."""
        ...

    def load(self, path: str | Path) -> None:
        """Replace the weights from a checkpoint; raises ``ValueError`` for a bad or foreign one."""
        ...


def budget_records(game_index: Sequence[int], budget: int, rng: random.Random) -> list[int]:
    """Indices (ascending) of at most ``budget`` records to train on, drawn uniformly within
    each game: game g's quota is proportional to its records (at least one, largest
    remainders), or, with more games than ``budget``, one record from each of ``budget`` games
    drawn uniformly. The loss averages each game's records and then the games (``grpo``
    aggregation), so a uniform draw within a game leaves every game's mean, and the step's
    gradient, unbiased; a step then costs the budget, not what the draw of seats played
    (``dapo`` and ``dr_grpo`` become their ratio estimators)."""
    by_game: dict[int, list[int]] = {}
    for i, g in enumerate(game_index):
        by_game.setdefault(g, []).append(i)
    games = list(by_game)
    if len(games) >= budget:
        quota = dict.fromkeys(rng.sample(games, budget), 1)
    else:
        extra, total = budget - len(games), len(game_index)
        raw = {g: extra * len(by_game[g]) / total for g in games}
        quota = {g: 1 + int(raw[g]) for g in games}
        left = budget - sum(quota.values())
        for g in sorted(games, key=lambda g: int(raw[g]) - raw[g])[:left]:
            quota[g] += 1
    return sorted(
        i for g, q in quota.items() for i in rng.sample(by_game[g], min(q, len(by_game[g])))
    )


class GRPOTrainer:
    """Clipped policy-gradient updates of a :class:`GRPOPolicy` from groups of games.

    ``reference`` (optional) is a frozen policy (e.g. a copy of the initial weights) whose
    ``log_prob`` anchors the KL term; ``epochs`` passes over each step's records (the first is
    on-policy, so its ratios are 1 and only later passes clip). ``ratio``, ``epsilon_high``,
    ``aggregation`` (with ``token_budget``, the most tokens a record may have: ``dr_grpo``'s
    constant), ``is_correction`` and ``is_cap``: :mod:`.grpo_loss`. ``mask_truncated``:
    records cut at the token budget leave the loss (DAPO: an answer that did not end says
    nothing about how it would have ended); their share is logged either way.
    ``max_records``: the most records a step trains on (:func:`budget_records`; None: all).
    """

    def __init__(
        self,
        policy: GRPOPolicy,
        *,
        lr: float = 1e-3,
        clip_eps: float = 0.2,
        kl_coef: float = 0.0,
        epochs: int = 1,
        max_grad_norm: float = 1.0,
        reference: GRPOPolicy | None = None,
        adv_eps: float = 1e-6,
        credit: str = "game",
        records_per_pass: int | None = None,
        ratio: str = "sequence_sum",
        epsilon_high: float | None = None,
        aggregation: str = "grpo",
        token_budget: int = 1,
        mask_truncated: bool = False,
        is_correction: str = "none",
        is_cap: float = 2.0,
        max_records: int | None = None,
    ) -> None:
        if credit not in CREDIT_RULES:
            raise ValueError(f"credit must be one of {', '.join(CREDITS)}, not {credit!r}")
        for name, value, allowed in (
            ("ratio", ratio, RATIO_KINDS),
            ("aggregation", aggregation, AGGREGATIONS),
            ("is_correction", is_correction, IS_CORRECTIONS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        if not is_cap > 1.0:
            raise ValueError(f"is_cap must be > 1, not {is_cap}")
        self.credit = credit
        self._credit = CREDIT_RULES[credit]
        self.policy = policy
        self.params = list(policy.trainable_parameters())
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        self.optimizer = torch.optim.Adam(self.params, lr=lr)
        self.clip_eps = clip_eps
        self.epsilon_high = epsilon_high
        self.kl_coef = kl_coef
        self.epochs = epochs
        self.max_grad_norm = max_grad_norm
        self.reference = reference
        self.adv_eps = adv_eps
        if records_per_pass is not None and records_per_pass < 1:
            raise ValueError(f"records_per_pass must be >= 1 or None, not {records_per_pass}")
        self.records_per_pass = records_per_pass
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records must be >= 1 or None, not {max_records}")
        self.max_records = max_records
        self.ratio = ratio
        self.aggregation = aggregation
        self.token_budget = token_budget
        self.mask_truncated = mask_truncated
        self.is_correction = is_correction
        self.is_cap = is_cap

    def _gather(self, groups: Sequence[Sequence[PlayedGame]], seed: int):
        """The step's trained records with their advantages and game index, and its metrics."""
        records: list[ActionRecord] = []
        advantages: list[float] = []
        game_index: list[int] = []
        all_scores: list[float] = []
        adv_abs: list[float] = []
        candidates = truncated = 0
        scale = self.aggregation != "dr_grpo"
        for group in groups:
            scores = torch.tensor([g.score for g in group], dtype=torch.float32)
            seat_records = [g.seat_records for g in group]
            all_scores.extend(scores.tolist())
            per_record, group_abs = self._credit(group, scores, seat_records, self.adv_eps, scale)
            adv_abs.extend(group_abs)
            for game_records, advs in zip(seat_records, per_record, strict=True):
                if not any(advs):
                    continue  # no gradient signal; skipping keeps the per-game mean honest
                candidates += len(game_records)
                truncated += sum(r.truncated for r in game_records)
                kept = [
                    (r, a)
                    for r, a in zip(game_records, advs, strict=True)
                    if not (self.mask_truncated and r.truncated)
                ]
                if not kept:
                    continue
                n_games = game_index[-1] + 1 if game_index else 0
                records.extend(r for r, _ in kept)
                advantages.extend(a for _, a in kept)
                game_index.extend([n_games] * len(kept))
        played = len(records)
        if self.max_records is not None and played > self.max_records:
            keep = budget_records(game_index, self.max_records, random.Random(seed))
            records = [records[i] for i in keep]
            advantages = [advantages[i] for i in keep]
            renumber = {g: k for k, g in enumerate(dict.fromkeys(game_index[i] for i in keep))}
            game_index = [renumber[game_index[i]] for i in keep]
        metrics = {
            "score_mean": float(sum(all_scores) / max(len(all_scores), 1)),
            "score_std": float(torch.tensor(all_scores).std(unbiased=False)) if all_scores else 0.0,
            "adv_abs_mean": float(sum(adv_abs) / max(len(adv_abs), 1)),
            "records": float(len(records)),
            "records_played": float(played),
            "truncated_share": truncated / candidates if candidates else 0.0,
            "tokens_mean": sum(r.tokens for r in records) / len(records) if records else 0.0,
        }
        return records, advantages, game_index, metrics

    def step(self, groups: Sequence[Sequence[PlayedGame]], *, seed: int = 0) -> dict[str, float]:
        """One update from ``groups`` (each a list of G games sharing opponents and seating,
        read at one learning seat: :attr:`PlayedGame.seat`); ``seed`` draws the records a
        ``max_records`` budget keeps (a run passes its step, so a resumed step draws the same).

        Returns logged metrics: ``loss``, ``policy_loss``, ``kl``, ``clip_fraction``,
        ``ratio_mean``, ``grad_norm``, ``adv_abs_mean``, ``score_mean``, ``score_std``,
        ``records`` (trained), ``records_played`` (before the budget), ``tokens_mean``,
        ``truncated_share`` (of the records with an advantage),
        ``old_log_prob_gap`` and the sampler weight's ``is_*`` statistics
        (:func:`~.grpo_loss.importance_weights`). A step whose groups all have zero advantage
        (identical scores) or no hero records makes no update and says so with ``records == 0``.
        """
        records, advantages, game_index, metrics = self._gather(groups, seed)
        if not records:
            zero = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
            return {**metrics, **zero, "ratio_mean": 1.0, "grad_norm": 0.0, "old_log_prob_gap": 0.0}
        sampled = torch.tensor([r.old_log_prob for r in records], dtype=torch.float32)
        lengths = torch.tensor([r.tokens for r in records], dtype=torch.int64)
        width = int(lengths.max())
        mask = token_mask(lengths, width)
        adv_t = torch.tensor(advantages, dtype=torch.float32)
        index = torch.tensor(game_index, dtype=torch.int64)
        weight = token_weights(lengths, index, self.aggregation, self.token_budget)
        metric_weight = weight / weight.sum()
        recompute = self.policy.recompute_old_log_probs
        old = torch.zeros((len(records), width), dtype=torch.float32)
        if not recompute:
            # The sampler's log-probs are the trainer's own, summed: a sequence ratio needs
            # only the sum; a token ratio needs per-token numbers, so one-token records only.
            if self.ratio == "token" and width > 1:
                raise ValueError("ratio 'token' needs recomputed per-token old log-probs")
            old[:, 0] = sampled
        ref = None
        if self.reference is not None and self.kl_coef > 0:
            with torch.no_grad():
                ref = padded_rows(token_rows(self.reference, records), width)
        is_weight = torch.ones(len(records), dtype=torch.float32)
        passes = self._passes(records)
        totals: dict[str, float] = {}
        grad_norm = 0.0
        per_epoch: list[dict[str, float]] = []
        for epoch in range(self.epochs):
            self.optimizer.zero_grad(set_to_none=True)
            totals = dict.fromkeys(
                ("loss", "policy_loss", "kl", "clip_fraction", "ratio_mean"), 0.0
            )
            # Gradient accumulation: each pass holds the graph of its own records only, so
            # memory is bounded by records_per_pass, not by the step's records; the loss is a
            # weighted sum over tokens, so the passes' gradients add up to the whole step's.
            for idx in passes:
                new = stack_rows(token_rows(self.policy, [records[i] for i in idx]), width)
                if recompute and epoch == 0:
                    # The sampler's numerics differ from the trainer's (a server's kernels, a
                    # KV-cache loop): the first epoch's own log-probs are the old ones (ratio 1),
                    # and the sampler's weight corrects for the answers having come from it.
                    old[idx] = new.detach()
                    trainer_sum = new.detach().sum(dim=1)
                    is_weight[idx], _ = importance_weights(
                        trainer_sum,
                        sampled[idx],
                        lengths[idx],
                        correction=self.is_correction,
                        cap=self.is_cap,
                    )
                parts = grpo_loss(
                    new,
                    old[idx],
                    adv_t[idx],
                    index[idx],
                    clip_eps=self.clip_eps,
                    epsilon_high=self.epsilon_high,
                    ref_log_prob=None if ref is None else ref[idx],
                    kl_coef=self.kl_coef,
                    weight=weight[idx],
                    mask=mask[idx],
                    ratio=self.ratio,
                    is_weight=is_weight[idx],
                    metric_weight=metric_weight[idx],
                )
                parts.loss.backward()
                for key in totals:
                    totals[key] += float(getattr(parts, key).detach())
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            grad_norm = float(norm) if math.isfinite(float(norm)) else float("nan")
            self.optimizer.step()
            per_epoch.append({**totals, "grad_norm": grad_norm})
        # The first epoch is on-policy (ratios 1); what a learning rate does shows in the later
        # ones, so each epoch's numbers are kept (epoch{k}_kl, ...), the last also unsuffixed.
        by_epoch = {
            f"epoch{k + 1}_{key}": value
            for k, numbers in enumerate(per_epoch)
            for key, value in numbers.items()
            if key in ("kl", "ratio_mean", "clip_fraction", "grad_norm")
        }
        trainer_old = (old * mask).sum(dim=1)
        _, is_stats = importance_weights(
            trainer_old, sampled, lengths, correction=self.is_correction, cap=self.is_cap
        )
        return {
            **metrics,
            **totals,
            **by_epoch,
            **is_stats,
            "grad_norm": grad_norm,
            "old_log_prob_gap": float((sampled - trainer_old).abs().mean()),
        }

    def _passes(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Record indices of each backward pass: all at once, or ``records_per_pass`` at a time
        in the order of the policy's ``record_size`` (similar lengths share a pass)."""
        n = len(records)
        if self.records_per_pass is None or n <= self.records_per_pass:
            return [torch.arange(n)]
        order = sorted(range(n), key=lambda i: self.policy.record_size(records[i]))
        step = self.records_per_pass
        return [torch.tensor(order[i : i + step]) for i in range(0, n, step)]

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of the next updates (a schedule calls this each step)."""
        if not lr >= 0:  # 0: a cosine schedule's last step with lr_final 0
            raise ValueError(f"learning rate must be >= 0, not {lr}")
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state, for resuming a run."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the optimizer's moments; the learning rate stays this trainer's (the run's
        config), so ``--resume --set train.lr=X`` takes effect."""
        lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
