"""The GRPO objective: ratio kinds, clip bounds, loss aggregation and the sampler's weight.

Split from :mod:`.grpo` (the interface, the game record and the trainer) because the loss has
grown options that every GRPO user expects (issue 39) and each is a pure tensor function
tested on its own. A step's records are held as padded per-token rows ``[N, T]`` with a mask
(one column for the policy network, whose records are one choice each); every option below is
a way of reading those rows.

**Ratio** (``train.ratio``), from the per-token log-ratio ``d_it = new_it - old_it``:

- ``sequence_sum``: one ratio per record, ``exp(sum_t d_it)`` (the answer's probability
  ratio; the trainer's only kind before issue 39). A 40-token answer whose tokens moved by
  0.005 each has ratio 1.22 and is clipped whole in epoch 2;
- ``sequence_mean``: one ratio per record, ``exp(mean_t d_it)`` (GSPO): the length-normalised
  ratio, comparable between short and long answers;
- ``token``: one ratio per token, ``exp(d_it)``, each clipped on its own (PPO as TRL and verl
  apply it to LLMs).

**Clip**: ``clip(r, 1 - clip_eps, 1 + epsilon_high)``; ``epsilon_high`` above ``clip_eps``
is DAPO's clip-higher (a token the policy favoured too little may rise further before the
clip stops its gradient); ``None`` keeps the symmetric clip.

**Aggregation** (``train.loss_aggregation``), the weight ``w_it`` of each token's term
(:func:`token_weights`; the sum over tokens of ``w_it * min(r A, clip(r) A)``):

- ``grpo``: each record's tokens share its record weight (1 / its game's records / games: a
  per-game mean, then a mean over games, so a long game does not outweigh a short one); with a
  sequence ratio this is exactly the loss before issue 39;
- ``dapo``: 1 / (tokens of the step): a token-level mean, so long answers weigh more;
- ``dr_grpo``: 1 / (records of the step x the token budget ``llm.max_new_tokens``): a sum over
  tokens divided by a constant (Dr. GRPO), so neither the answer's length nor the step's
  size rescales a token's gradient; the advantages are then not divided by the group's
  std either (Dr. GRPO's second fix; :mod:`.grpo` applies it).

**Sampler weight** (``train.is_correction``; :func:`importance_weights`): the sampler (vLLM,
``llm serve``, the KV-cache loop) and the trainer compute the "old" probability of an answer
with different numerics; the trainer's is the one the ratio uses, so the samples come from a
slightly different policy than the one the loss assumes. Each record's term is multiplied by
the truncated importance weight ``min(rho, is_cap)`` (``truncate``) or dropped when
``rho > is_cap`` (``mask``), with ``rho = exp(mean_t (trainer_old_it - sampler_it))``: sequence
level, length-normalised (a sum would make every long answer an outlier), capped at 2 as TRL's
``vllm_importance_sampling_correction``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.records import ActionRecord


def _sequence_sum(log_ratio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return log_ratio.sum(dim=1, keepdim=True).expand_as(log_ratio)


def _sequence_mean(log_ratio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return (log_ratio.sum(dim=1, keepdim=True) / lengths).expand_as(log_ratio)


def _token(log_ratio: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return log_ratio


# ratio -> (masked per-token log-ratio [N, T], tokens [N, 1]) -> the ratio's log, per token
RATIO_RULES = {"sequence_sum": _sequence_sum, "sequence_mean": _sequence_mean, "token": _token}
RATIO_KINDS = tuple(RATIO_RULES)


def _grpo_weights(mask, lengths, game_index, budget):
    per_record = record_weights(game_index) / lengths.clamp(min=1).to(torch.float32)
    return per_record[:, None] * mask


def _dapo_weights(mask, lengths, game_index, budget):
    return mask / mask.sum().clamp(min=1.0)


def _dr_grpo_weights(mask, lengths, game_index, budget):
    if budget < 1:
        raise ValueError(f"dr_grpo needs a token budget >= 1, not {budget}")
    return mask / (len(lengths) * budget)


# aggregation -> (mask [N, T], tokens [N], game index [N], token budget) -> weights [N, T]
AGGREGATION_RULES = {"grpo": _grpo_weights, "dr_grpo": _dr_grpo_weights, "dapo": _dapo_weights}
AGGREGATIONS = tuple(AGGREGATION_RULES)
# is_correction -> (rho [N], cap) -> each record's weight [N]
IS_RULES = {
    "truncate": lambda rho, cap: rho.clamp(max=cap),
    "mask": lambda rho, cap: (rho <= cap).to(rho.dtype),
    "none": lambda rho, cap: torch.ones_like(rho),
}
IS_CORRECTIONS = tuple(IS_RULES)


@dataclass
class LossParts:
    """The terms of one GRPO loss evaluation (tensors; ``loss`` carries the graph)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    clip_fraction: torch.Tensor
    ratio_mean: torch.Tensor


def record_weights(game_index: torch.Tensor) -> torch.Tensor:
    """``[N]`` weight of each record: 1 / (its game's records) / (games), so the loss is a
    per-game mean, then a mean over games (``game_index``: ``[N]`` int64, 0..games-1)."""
    n_games = int(game_index.max().item()) + 1 if game_index.numel() else 0
    counts = torch.bincount(game_index, minlength=n_games).clamp(min=1).to(torch.float32)
    return 1.0 / (counts[game_index] * max(n_games, 1))


def token_mask(lengths: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``[N, T]`` float mask of the real tokens of rows of ``lengths`` (``T``: the longest)."""
    width = int(lengths.max().item()) if width is None and lengths.numel() else (width or 0)
    return (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float32)


def token_weights(
    lengths: torch.Tensor, game_index: torch.Tensor, aggregation: str, token_budget: int = 1
) -> torch.Tensor:
    """``[N, T]`` weight of each token's term under ``aggregation`` (see module doc), for a
    whole step's records (the passes of a step take slices of it, so their parts add up)."""
    if aggregation not in AGGREGATION_RULES:
        raise ValueError(
            f"loss aggregation must be one of {', '.join(AGGREGATIONS)}, not {aggregation!r}"
        )
    return AGGREGATION_RULES[aggregation](token_mask(lengths), lengths, game_index, token_budget)


def token_rows(policy: Any, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
    """``policy.token_log_probs(records)``, each row checked against its record's length."""
    rows = list(policy.token_log_probs(records))
    for row, record in zip(rows, records, strict=True):
        if row.shape != (record.tokens,):
            raise ValueError(
                f"a record of {record.tokens} tokens got {tuple(row.shape)} token log-probs"
            )
    return rows


def padded_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """``[N, width]`` constant rows padded with zeros (no graph)."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row.float()
    return out


def stack_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """``[N, width]`` float32 rows padded with zeros, keeping the graph, on the CPU: the loss's
    other tensors (advantages, old log-probs, masks) live there whatever the model's device."""
    stacked = torch.stack(
        [torch.nn.functional.pad(r.float(), (0, width - r.shape[0])) for r in rows]
    )
    return stacked.cpu()


def _as_rows(t: torch.Tensor | None) -> torch.Tensor | None:
    return t if t is None or t.dim() == 2 else t[:, None]


def grpo_loss(
    new_log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    game_index: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    epsilon_high: float | None = None,
    ref_log_prob: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    weight: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    ratio: str = "sequence_sum",
    is_weight: torch.Tensor | None = None,
    metric_weight: torch.Tensor | None = None,
) -> LossParts:
    """The clipped GRPO objective over N records (see the module doc and :mod:`.grpo`).

    ``new_log_prob`` (with graph), ``old_log_prob``, ``ref_log_prob`` (constants): ``[N]``, a
    record's log-prob, or ``[N, T]`` per-token log-probs padded with zeros, ``mask`` ``[N, T]``
    marking the real tokens (default all). ``advantages``: ``[N]``; ``game_index``: ``[N]``
    int64 game of each record, for the default ``grpo`` weights. ``weight``: the records'
    weights when these N are a slice of a larger set, ``[N]`` per record (spread evenly over
    its tokens) or ``[N, T]`` per token (:func:`token_weights`); ``game_index`` is then
    unused. ``is_weight``: ``[N]`` the sampler correction multiplying each record's policy
    term (:func:`importance_weights`). ``metric_weight``: ``[N, T]`` weights of the clip
    fraction and mean ratio (default ``weight`` normalised to sum 1 over these rows).
    The KL term (k3 estimator) is taken on the ratio's own unit: the record's summed or mean
    log-ratio to the reference, or each token's.
    """
    if ratio not in RATIO_RULES:
        raise ValueError(f"ratio must be one of {', '.join(RATIO_KINDS)}, not {ratio!r}")
    rule = RATIO_RULES[ratio]
    new, old, ref = _as_rows(new_log_prob), _as_rows(old_log_prob), _as_rows(ref_log_prob)
    if new.shape != old.shape or new.shape[0] != advantages.shape[0] or advantages.dim() != 1:
        raise ValueError("new_log_prob, old_log_prob and advantages must all be [N] (or [N, T])")
    mask = torch.ones_like(new) if mask is None else mask.to(new.dtype)
    if mask.shape != new.shape:
        raise ValueError("mask must be [N, T] like the log-probs")
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    if weight is None:
        weight = record_weights(game_index).to(new.dtype)
    if weight.dim() == 1:
        if weight.shape[0] != new.shape[0]:
            raise ValueError("weight must be [N] like new_log_prob")
        weight = weight[:, None] * mask / lengths
    elif weight.shape != new.shape:
        raise ValueError("weight must be [N] or [N, T] like the log-probs")

    def unit(log_ratio: torch.Tensor) -> torch.Tensor:  # [N, T] -> the ratio's unit, [N, T]
        return rule(log_ratio * mask, lengths)

    high = clip_eps if epsilon_high is None else epsilon_high
    r = torch.exp(unit(new - old))
    adv = advantages[:, None]
    term = torch.minimum(r * adv, torch.clamp(r, 1.0 - clip_eps, 1.0 + high) * adv)
    if is_weight is not None:
        term = term * is_weight[:, None]
    policy_loss = -(term * weight).sum()
    if ref is not None and kl_coef > 0:
        log_ratio_ref = unit(ref - new)
        kl = ((torch.exp(log_ratio_ref) - log_ratio_ref - 1.0) * weight).sum()
    else:
        kl = torch.zeros((), dtype=new.dtype)
    with torch.no_grad():
        if metric_weight is None:
            metric_weight = weight / weight.sum().clamp(min=1e-12)
        was_clipped = ((r < 1.0 - clip_eps) | (r > 1.0 + high)).to(new.dtype)
        clip_fraction = (was_clipped * metric_weight).sum()
        ratio_mean = (r * metric_weight).sum()
    return LossParts(policy_loss + kl_coef * kl, policy_loss, kl, clip_fraction, ratio_mean)


def importance_weights(
    trainer_old: torch.Tensor,
    sampler_old: torch.Tensor,
    lengths: torch.Tensor,
    *,
    correction: str = "truncate",
    cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The sampler correction of each record and its statistics (see module doc).

    ``trainer_old``, ``sampler_old``: ``[N]`` each record's summed log-prob under the weights
    that sampled it, by the trainer and by the sampler; ``lengths``: ``[N]`` its tokens.
    Returns ``[N]`` weights (1 with ``correction="none"``) and ``is_ratio_min``/``_mean``/``_max``
    (of ``rho``), ``is_capped_share`` (records with ``rho > cap``: truncated or masked),
    ``is_outside_share`` (``rho`` outside ``[1/cap, cap]``: the alarm's number, since a
    sampler that under-reports is as wrong as one that over-reports) and
    ``is_log_ratio_abs_mean`` (mean |per-token log-ratio|).
    """
    if correction not in IS_RULES:
        raise ValueError(
            f"is_correction must be one of {', '.join(IS_CORRECTIONS)}, not {correction!r}"
        )
    if not cap > 1.0:
        raise ValueError(f"is_cap must be > 1, not {cap}")
    per_token = (trainer_old - sampler_old) / lengths.clamp(min=1).to(trainer_old.dtype)
    rho = torch.exp(per_token)
    capped = rho > cap
    outside = per_token.abs() > math.log(cap)
    weights = IS_RULES[correction](rho, cap)
    n = max(int(rho.numel()), 1)
    stats = {
        "is_ratio_min": float(rho.min()) if rho.numel() else 1.0,
        "is_ratio_mean": float(rho.mean()) if rho.numel() else 1.0,
        "is_ratio_max": float(rho.max()) if rho.numel() else 1.0,
        "is_capped_share": float(capped.sum()) / n,
        "is_outside_share": float(outside.sum()) / n,
        "is_log_ratio_abs_mean": float(per_token.abs().mean()) if rho.numel() else 0.0,
    }
    return weights.detach(), stats


def mismatch_warning(metrics: dict[str, float], share: float, cap: float) -> str | None:
    """The warning of a step whose sampler drew the answers from another distribution than the
    trainer scores (a server's kernels, a stale adapter, a temperature one side ignores): more
    than ``share`` of its answers have a weight outside ``[1/cap, cap]``. Said out loud, since
    the weight can only cap the mismatch, not make it right. None below the threshold."""
    outside = metrics.get("is_outside_share", 0.0)
    if outside <= share:
        return None
    return (
        f"the sampler's log-probs differ from the trainer's: {outside:.1%} of answers have a "
        f"sampler weight outside [1/{cap:g}, {cap:g}] (mean |per-token log ratio| "
        f"{metrics['is_log_ratio_abs_mean']:.3f}, weight {metrics['is_ratio_min']:.3f}.."
        f"{metrics['is_ratio_max']:.3f})"
    )
