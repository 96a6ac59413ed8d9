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
policy), ``exp(ref - new) - (ref - new) - 1`` per record (:meth:`GRPOTrainer.kl_coef_at`: the
coefficient may warm up from 0 over the first steps). Averaging per game first keeps a long
game (many units) from outweighing a short one in its group. That is the ``sequence_sum``
ratio with ``grpo`` aggregation; the other ratio kinds (per token, length mean), the
clip-higher bound, the ``dapo``/``dr_grpo`` aggregations and the sampler's importance weight
live in :mod:`.grpo_loss`. ``dr_grpo`` also leaves the advantages unscaled (``A_g = s_g -
mean(s)``, Dr. GRPO: dividing by the group's std up-weights groups whose games barely differ).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from leaguezero.common.memory import release_freed_memory, rss_mb
from leaguezero.diplomacy.game.records import ActionRecord, Actor, PlayedGame
from leaguezero.diplomacy.train.credit import CREDIT_RULES
from leaguezero.diplomacy.train.grpo_loss import (
    grpo_loss,
    importance_weights,
    padded_rows,
    stack_rows,
    token_mask,
    token_rows,
    token_weights,
)
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings, scheduled_kl_coef

MIB, GB = 2**20, 1e9


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


@dataclasses.dataclass
class _StepBatch:
    """One step's trained records as the tensors every backward pass slices (N records of at
    most T tokens): the record that goes from gathering to the loss, as verl's batch does."""

    records: list[ActionRecord]
    sampled: torch.Tensor  # [N] float32: the sampler's summed log-probs
    lengths: torch.Tensor  # [N] int64: tokens per record
    mask: torch.Tensor  # [N, T] float32: a record's real tokens
    advantages: torch.Tensor  # [N] float32
    game_index: torch.Tensor  # [N] int64: the record's game, numbered within the step
    weight: torch.Tensor  # [N, T] float32: each token's weight in the loss (the aggregation)
    metric_weight: torch.Tensor  # [N, T] float32: weight / weight.sum(), for the metrics
    old: torch.Tensor  # [N, T] float32: old log-probs (the first epoch's when recomputed)
    ref: torch.Tensor | None  # [N, T] float32: the reference's (None: no KL term this step)
    is_weight: torch.Tensor  # [N] float32: the sampler weight (1 until the first epoch sets it)


class GRPOTrainer:
    """Clipped policy-gradient updates of a :class:`GRPOPolicy` from groups of games.

    ``settings`` (:class:`~.grpo_settings.GRPOSettings`) holds every knob of the update, made
    once where the run starts. ``reference`` (optional) is a frozen policy (e.g. a copy of the
    initial weights) whose ``log_prob`` anchors the KL term; the KL weight of a step is
    :meth:`kl_coef_at` (its warm-up). ``epochs`` passes over each step's records (the first is
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
        settings: GRPOSettings = GRPOSettings(),
        *,
        reference: GRPOPolicy | None = None,
    ) -> None:
        self.settings = settings
        self._credit = CREDIT_RULES[settings.credit]
        self.policy = policy
        self.params = list(policy.trainable_parameters())
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        self.optimizer = torch.optim.Adam(self.params, lr=settings.lr)
        self.reference = reference

    def kl_coef_at(self, step: int | None) -> float:
        """The KL weight of training step ``step`` (1-based): ``kl_coef`` after a linear
        warm-up from 0 over ``kl_warmup_steps`` (:func:`scheduled_kl_coef`); None (a caller
        outside a run's steps): ``kl_coef``."""
        if step is None:
            return self.settings.kl_coef
        return scheduled_kl_coef(self.settings.kl_coef, step, self.settings.kl_warmup_steps)

    def _gather(self, groups: Sequence[Sequence[PlayedGame]], seed: int):
        """The step's trained records with their advantages and game index, and its metrics."""
        settings = self.settings
        records: list[ActionRecord] = []
        advantages: list[float] = []
        game_index: list[int] = []
        all_scores: list[float] = []
        adv_abs: list[float] = []
        candidates = truncated = 0
        scale = settings.aggregation != "dr_grpo"
        for group in groups:
            scores = torch.tensor([g.score for g in group], dtype=torch.float32)
            seat_records = [g.seat_records for g in group]
            all_scores.extend(scores.tolist())
            per_record, group_abs = self._credit(
                group, scores, seat_records, settings.adv_eps, scale
            )
            adv_abs.extend(group_abs)
            for game_records, advs in zip(seat_records, per_record, strict=True):
                if not any(advs):
                    continue  # no gradient signal; skipping keeps the per-game mean honest
                candidates += len(game_records)
                truncated += sum(r.truncated for r in game_records)
                kept = [
                    (r, a)
                    for r, a in zip(game_records, advs, strict=True)
                    if not (settings.mask_truncated and r.truncated)
                ]
                if not kept:
                    continue
                n_games = game_index[-1] + 1 if game_index else 0
                records.extend(r for r, _ in kept)
                advantages.extend(a for _, a in kept)
                game_index.extend([n_games] * len(kept))
        played = len(records)
        if settings.max_records is not None and played > settings.max_records:
            keep = budget_records(game_index, settings.max_records, random.Random(seed))
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

    def step(
        self,
        groups: Sequence[Sequence[PlayedGame]],
        *,
        seed: int = 0,
        global_step: int | None = None,
    ) -> dict[str, float]:
        """One update from ``groups`` (each a list of G games sharing opponents and seating,
        read at one learning seat: :attr:`PlayedGame.seat`); ``seed`` draws the records a
        ``max_records`` budget keeps (a run passes its step, so a resumed step draws the same);
        ``global_step``: the run's training step (1-based), which sets the KL weight
        (:meth:`kl_coef_at`; None: ``kl_coef``, no warm-up).

        Returns logged metrics: ``loss``, ``policy_loss``, ``kl``, ``kl_coef`` (the step's KL
        weight), ``clip_fraction``, ``ratio_mean``, ``grad_norm``, ``adv_abs_mean``,
        ``score_mean``, ``score_std``, ``records`` (trained), ``records_played`` (before the
        budget), ``tokens_mean``, ``truncated_share`` (of the records with an advantage),
        ``old_log_prob_gap`` and the sampler weight's ``is_*`` statistics
        (:func:`~.grpo_loss.importance_weights`). A step whose groups all have zero advantage
        (identical scores) or no hero records makes no update and says so with ``records == 0``.
        """
        kl_coef = self.kl_coef_at(global_step)
        records, advantages, game_index, metrics = self._gather(groups, seed)
        if not records:
            zero = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
            return {
                **metrics,
                **zero,
                "ratio_mean": 1.0,
                "grad_norm": 0.0,
                "old_log_prob_gap": 0.0,
                "kl_coef": kl_coef,
            }
        batch = self._batch(records, advantages, game_index, kl_coef)
        passes = self._passes(records)
        per_epoch = [
            self._epoch(batch, passes, epoch, kl_coef) for epoch in range(self.settings.epochs)
        ]
        return {**metrics, **self._step_metrics(batch, per_epoch), "kl_coef": kl_coef}

    def _batch(
        self,
        records: list[ActionRecord],
        advantages: list[float],
        game_index: list[int],
        kl_coef: float,
    ) -> _StepBatch:
        """The step's tensors; the reference's log-probs only when the step has a KL term."""
        sampled = torch.tensor([r.old_log_prob for r in records], dtype=torch.float32)
        lengths = torch.tensor([r.tokens for r in records], dtype=torch.int64)
        width = int(lengths.max())
        index = torch.tensor(game_index, dtype=torch.int64)
        weight = token_weights(
            lengths, index, self.settings.aggregation, self.settings.token_budget
        )
        old = torch.zeros((len(records), width), dtype=torch.float32)
        if not self.policy.recompute_old_log_probs:
            # The sampler's log-probs are the trainer's own, summed: a sequence ratio needs
            # only the sum; a token ratio needs per-token numbers, so one-token records only.
            if self.settings.ratio == "token" and width > 1:
                raise ValueError("ratio 'token' needs recomputed per-token old log-probs")
            old[:, 0] = sampled
        ref = None
        if self.reference is not None and kl_coef > 0:
            with torch.no_grad():
                ref = padded_rows(token_rows(self.reference, records), width)
        return _StepBatch(
            records=records,
            sampled=sampled,
            lengths=lengths,
            mask=token_mask(lengths, width),
            advantages=torch.tensor(advantages, dtype=torch.float32),
            game_index=index,
            weight=weight,
            metric_weight=weight / weight.sum(),
            old=old,
            ref=ref,
            is_weight=torch.ones(len(records), dtype=torch.float32),
        )

    def _epoch(
        self, batch: _StepBatch, passes: list[torch.Tensor], epoch: int, kl_coef: float
    ) -> dict[str, float]:
        """One gradient pass over the step's records and its optimizer step; the epoch's
        summed loss terms and its gradient norm (before clipping)."""
        settings = self.settings
        self.optimizer.zero_grad(set_to_none=True)
        totals = dict.fromkeys(("loss", "policy_loss", "kl", "clip_fraction", "ratio_mean"), 0.0)
        width = batch.old.shape[1]
        # Gradient accumulation: each pass holds the graph of its own records only, so
        # memory is bounded by records_per_pass, not by the step's records; the loss is a
        # weighted sum over tokens, so the passes' gradients add up to the whole step's.
        for idx in passes:
            new = stack_rows(token_rows(self.policy, [batch.records[i] for i in idx]), width)
            if self.policy.recompute_old_log_probs and epoch == 0:
                # The sampler's numerics differ from the trainer's (a server's kernels, a
                # KV-cache loop): the first epoch's own log-probs are the old ones (ratio 1),
                # and the sampler's weight corrects for the answers having come from it.
                batch.old[idx] = new.detach()
                batch.is_weight[idx], _ = importance_weights(
                    new.detach().sum(dim=1),
                    batch.sampled[idx],
                    batch.lengths[idx],
                    correction=settings.is_correction,
                    cap=settings.is_cap,
                )
            parts = grpo_loss(
                new,
                batch.old[idx],
                batch.advantages[idx],
                batch.game_index[idx],
                clip_eps=settings.clip_eps,
                epsilon_high=settings.epsilon_high,
                ref_log_prob=None if batch.ref is None else batch.ref[idx],
                kl_coef=kl_coef,
                weight=batch.weight[idx],
                mask=batch.mask[idx],
                ratio=settings.ratio,
                is_weight=batch.is_weight[idx],
                metric_weight=batch.metric_weight[idx],
            )
            parts.loss.backward()
            if settings.trim_above_gb is not None and rss_mb() * MIB > settings.trim_above_gb * GB:
                release_freed_memory()  # what the pass freed, before a longer record's pass
            for key in totals:
                totals[key] += float(getattr(parts, key).detach())
        norm = torch.nn.utils.clip_grad_norm_(self.params, settings.max_grad_norm)
        grad_norm = float(norm) if math.isfinite(float(norm)) else float("nan")
        self.optimizer.step()
        return {**totals, "grad_norm": grad_norm}

    def _step_metrics(
        self, batch: _StepBatch, per_epoch: list[dict[str, float]]
    ) -> dict[str, float]:
        """The last epoch's loss terms, each epoch's (``epoch{k}_kl``, ...), the sampler
        weight's statistics and the sampler/trainer log-prob gap."""
        last = dict(per_epoch[-1]) if per_epoch else {"grad_norm": 0.0}
        grad_norm = last.pop("grad_norm")
        # The first epoch is on-policy (ratios 1); what a learning rate does shows in the later
        # ones, so each epoch's numbers are kept (epoch{k}_kl, ...), the last also unsuffixed.
        by_epoch = {
            f"epoch{k + 1}_{key}": value
            for k, numbers in enumerate(per_epoch)
            for key, value in numbers.items()
            if key in ("kl", "ratio_mean", "clip_fraction", "grad_norm")
        }
        trainer_old = (batch.old * batch.mask).sum(dim=1)
        _, is_stats = importance_weights(
            trainer_old,
            batch.sampled,
            batch.lengths,
            correction=self.settings.is_correction,
            cap=self.settings.is_cap,
        )
        return {
            **last,
            **by_epoch,
            **is_stats,
            "grad_norm": grad_norm,
            "old_log_prob_gap": float((batch.sampled - trainer_old).abs().mean()),
        }

    def _passes(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Record indices of each backward pass: all at once, or ``records_per_pass`` at a time
        in the order of the policy's ``record_size`` (similar lengths share a pass)."""
        n, per_pass = len(records), self.settings.records_per_pass
        if per_pass is None or n <= per_pass:
            return [torch.arange(n)]
        order = sorted(range(n), key=lambda i: self.policy.record_size(records[i]))
        step = per_pass
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
