"""The ``train`` section of the Diplomacy config: GRPO training of the hero, and
:class:`HeroKind`, ``train.agent`` read once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from leaguezero.common.config import Section


@dataclass(frozen=True)
class HeroKind:
    """``train.agent`` read once: which hero the league trains."""

    name: str  # "policy" | "llm" (stored in state.pt; a resume must match)
    llm: bool  # a LoRA adapter on llm.base_model (else the small policy network)


HERO_KINDS = {"policy": HeroKind("policy", llm=False), "llm": HeroKind("llm", llm=True)}


class TrainSection(Section):
    """GRPO training of the hero (leaguezero diplomacy train; docs/guides/diplomacy_training.md)."""

    agent: Literal["policy", "llm"] = Field(
        "policy",
        description="The hero: policy (the small CPU network) or llm (a LoRA adapter on "
        "llm.base_model, sampled in process or through an OpenAI-compatible server).",
    )
    steps: int = Field(300, ge=1, description="Training steps (one GRPO update each).")
    groups_per_step: int = Field(
        1, ge=1, description="Opponent draws per step; each is one group of games."
    )
    group_size: int = Field(
        8, ge=2, description="Games per group (same opponents and seating, different seeds)."
    )
    lr: float = Field(3e-3, gt=0, description="Adam learning rate (the first step's).")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant",
        description="constant keeps lr; cosine falls from lr to lr_final * lr at the last step "
        "(so a run ends by settling rather than drifting; an LLM hero's early gain was lost at "
        "constant lr, docs/guides/diplomacy_training.md).",
    )
    lr_final: float = Field(
        0.1, ge=0, le=1, description="Cosine schedule: the last step's lr as a fraction of lr."
    )
    clip_eps: float = Field(0.2, gt=0, description="PPO ratio clip: ratios kept in 1 +- clip_eps.")
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the KL to the frozen initial policy (0 disables): the agent "
        "--init-from names, else the initial network (policy hero) or the base LM (llm hero).",
    )
    kl_warmup_steps: int = Field(
        0,
        ge=0,
        description="KL warm-up: with N > 1 the KL weight rises linearly from 0 at step 1 to "
        "kl_coef at step N, then stays (each step's event logs it as kl_coef); 0 or 1: kl_coef "
        "from the first step.",
    )
    value_coef: float = Field(
        0.5,
        ge=0,
        description="Weight of the value head's MSE on the games' final score shares beside "
        "the GRPO loss (a policy network with model.value_head only).",
    )
    epochs: int = Field(2, ge=1, description="Gradient passes over each step's records.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient norm clip.")
    records_per_pass: int = Field(
        0,
        ge=0,
        description="Records whose graph one backward pass holds (gradient accumulation: "
        "trainer memory is bounded by this, not by a step's records). 0: auto: for an LLM "
        "hero as many as train.max_memory_gb leaves room for at the base model's size "
        "(docs/guides/llm.md#memory), all of a step's records for the policy network.",
    )
    max_memory_gb: float = Field(
        4.0,
        gt=0,
        description="The trainer process's memory budget (GB) that records_per_pass: 0 sizes "
        "an LLM hero's backward passes to (the model, its sampling and one pass's "
        "activations; at least one record a pass).",
    )
    max_records: int = Field(
        0,
        ge=0,
        description="The most records a step trains on: a uniform draw within each game "
        "(every game's mean, and so the gradient, stays unbiased), so a step whose draw seats "
        "the live hero at many powers costs this, not what it played (0: all records).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="LLM hero: recompute each layer's activations in the backward pass instead "
        "of keeping them (about 1.3x the CPU of a step for several times more records per "
        "pass; docs/guides/llm.md#memory).",
    )
    play_processes: int = Field(
        1,
        ge=1,
        description="LLM hero sampled in process: processes that play each group's games, the "
        "trainer and play_processes - 1 helpers (each its own copy of the base model and "
        "run.threads torch threads), the games split among them: 2 plays on both cores of a "
        "2-core machine (docs/guides/llm.md).",
    )
    learn_from: Literal["hero", "live_seats"] = Field(
        "live_seats",
        description="Whose records train: live_seats (the hero power's seat and every mirror "
        "seat the live weights played, each credited with its own score) or hero (the hero "
        "power's seat only; the runs documented before this option).",
    )
    credit: Literal["game", "phase"] = Field(
        "game",
        description="Advantage of a record: game (the seat's final score, group-normalised) "
        "or phase (only the score gained from that phase on, baselined per phase).",
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description="Sampling temperature of learned agents in training games (the hero, its "
        "mirror seats, past checkpoints); LLM folders named on the command line sample at "
        "llm.temperature.",
    )
    opponents_greedy: bool = Field(
        False,
        description="Policy hero: league opponents that are networks (past checkpoints, frozen "
        "policy files) play their most probable orders in training games, as evaluations play "
        "them (an exploiter's target; diplomacy exploit sets it unless --sample).",
    )

    ratio: Literal["token", "sequence_mean", "sequence_sum"] = Field(
        "token",
        description="GRPO ratio: token (one per token, each clipped: TRL's and verl's PPO for "
        "LLMs), sequence_mean (one per answer, exp of the mean token log-ratio: GSPO) or "
        "sequence_sum (one per answer, exp of the summed log-ratio: the trainer before issue "
        "39, which clips a long answer whole). The policy network's records are one token "
        "each: the three agree there.",
    )
    epsilon_high: float | None = Field(
        None,
        gt=0,
        description="Upper clip bound: ratios kept in [1 - clip_eps, 1 + epsilon_high] (DAPO's "
        "clip-higher, e.g. 0.28); null: clip_eps (symmetric).",
    )
    loss_aggregation: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "grpo",
        description="How token terms add up: grpo (each answer's token mean, a per-game mean, "
        "then a mean over games: a long game does not outweigh a short one), dapo (a mean "
        "over the step's tokens) or dr_grpo (a sum over tokens / (records x "
        "llm.max_new_tokens), advantages not divided by the group's std).",
    )
    mask_truncated: bool = Field(
        False,
        description="Leave answers cut at llm.max_new_tokens out of the loss (DAPO); off: they "
        "train like any other, so a rambling answer's low reward teaches brevity. Their "
        "share is logged as truncated_share either way.",
    )
    is_correction: Literal["truncate", "mask", "none"] = Field(
        "truncate",
        description="Sampler/trainer mismatch correction of an LLM hero: each answer's loss "
        "term times min(rho, is_cap) (truncate) or dropped when rho > is_cap (mask), rho = "
        "exp(mean per-token trainer - sampler log-prob of the sampled answer); none: logged "
        "only. The network samples with the trainer's own numbers (rho = 1).",
    )
    is_cap: float = Field(
        2.0, gt=1, description="Cap of the sampler weight rho (TRL's vllm_importance_sampling_cap)."
    )
    is_warn_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Warn (stderr and a diplomacy.sampler_mismatch event) when more than this "
        "share of a step's answers have rho outside [1/is_cap, is_cap].",
    )
    score_temperature: Literal["sampling", "one"] = Field(
        "sampling",
        description="Temperature the LLM trainer scores answers at: sampling (train.temperature "
        "or the seat's, as the answer was drawn: on-policy) or one (temperature 1 whatever "
        "the sampling temperature: the trainer before issue 39, off-policy unless "
        "train.temperature is 1).",
    )

    @property
    def mirrors_learn(self) -> bool:
        """``learn_from`` read once: whether mirror seats train too (``live_seats``)."""
        return self.learn_from == "live_seats"

    @property
    def hero(self) -> HeroKind:
        """``agent`` as a :class:`HeroKind` (the one place it is read)."""
        return HERO_KINDS[self.agent]
