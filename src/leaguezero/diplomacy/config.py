"""The Diplomacy config: game length, scoring, ratings, seating and where games are saved.

Each field's description is its documentation (``configs/diplomacy_local_cpu.yaml`` is written
from these with :func:`leaguezero.common.config.commented_yaml`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from leaguezero.common.config import Section, move_renamed_keys
from leaguezero.league.config import LeagueSection as SharedLeagueSection


@dataclass(frozen=True)
class HeroKind:
    """``train.agent`` read once: which hero the league trains."""

    name: str  # "policy" | "llm" (stored in state.pt; a resume must match)
    llm: bool  # a LoRA adapter on llm.base_model (else the small policy network)


@dataclass(frozen=True)
class SamplingBackend:
    """``llm.backend`` read once: where LLM seats are sampled."""

    name: str  # "hf" | "openai"
    shared_server: bool  # an OpenAI-compatible server every process and node can reach


# Old dotted key -> its new name (one vocabulary with Yatzy's config: run.seed, run.threads,
# a model section); old configs and run config.yaml files keep loading, with a warning.
RENAMED_KEYS = {
    "elo_k": "league.elo_k",
    "seed": "run.seed",
    "train.seed": "run.seed",
    "train.threads": "run.threads",
    "train.hidden": "model.hidden",
    "train.layers": "model.layers",
}
# Retired switches: still accepted in old configs (ignored, with a warning saying why).
RETIRED_KEYS = {
    "llm.bf16_autocast": "no gain measured in a whole league step; `leaguezero llm serve "
    "--bf16-autocast` keeps the option for serving",
    "llm.lora_dropout": "inert: the hf backend samples and trains in eval mode, so adapters "
    "are written with dropout 0",
}


class RunSection(Section):
    """Run identity: seed, threads, and where training runs (the keys of Yatzy's run section)."""

    seed: int = Field(
        0,
        ge=0,
        description="Master seed; every game and seat seed, the initial weights, sampling and "
        "opponent draws derive from it.",
    )
    threads: int = Field(
        1,
        ge=1,
        description="Torch threads per process (1: one core, the shared-machine default; an LLM "
        "hero sampled in process gains from more).",
    )
    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where diplomacy train plays the network hero's games and the evaluator's "
        "jobs: this process, or Ray tasks (extra 'ray'; docs/guides/cluster.md).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster for backend ray: host:port, 'auto', or null (RAY_ADDRESS, the "
        "cluster `leaguezero cluster start` started, else a private local one).",
    )


class ModelSection(Section):
    """The policy network of a policy hero (docs/guides/diplomacy_training.md)."""

    hidden: int = Field(64, ge=4, description="Policy network width.")
    layers: int = Field(2, ge=0, description="Graph layers of the policy network.")
    decoder: Literal["independent", "sequential"] = Field(
        "independent",
        description="independent: each unit's order from the board; sequential: each given "
        "the power's orders decoded before it this phase (a run --init-from a checkpoint "
        "takes the checkpoint's).",
    )
    value_head: bool = Field(
        False,
        description="A head predicting the power's final score share (trained with "
        "train.value_coef; a run --init-from a checkpoint takes the checkpoint's).",
    )


HERO_KINDS = {"policy": HeroKind("policy", llm=False), "llm": HeroKind("llm", llm=True)}
SAMPLING_BACKENDS = {
    "hf": SamplingBackend("hf", shared_server=False),
    "openai": SamplingBackend("openai", shared_server=True),
}


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


class ExploitersSection(Section):
    """Exploiters beside the hero (AlphaStar's roles; docs/reference/league.md#exploiter-roles)."""

    main: int = Field(
        0, ge=0, description="Main exploiters: trained against six copies of the live hero only."
    )
    league: int = Field(
        0, ge=0, description="League exploiters: trained against PFSP draws over the whole pool."
    )
    every: int = Field(
        4,
        ge=2,
        description="Every Nth training step trains an exploiter (in turn) instead of the hero: "
        "exploiters take 1/N of the run's games and updates, so a run with them costs what one "
        "without them does.",
    )
    win_share: float = Field(
        0.3,
        gt=0,
        le=1,
        description="An exploiter whose win share over its last `window` training games "
        "reaches this joins the pool as a frozen snapshot; a main exploiter then resets to its "
        "initial weights (parity is 1/7).",
    )
    window: int = Field(16, ge=1, description="Training games the win_share rule looks back on.")
    max_steps: int = Field(
        25,
        ge=1,
        description="After this many of its own steps without reaching win_share an exploiter "
        "joins the pool anyway; a main exploiter resets (a league exploiter goes on).",
    )


class LeagueSection(SharedLeagueSection):
    """League around the hero: baselines, PFSP opponents, checkpoint schedule, async evaluator."""

    base_model_elo: float = Field(1000.0, description="Initial rating of base_model (step 0).")
    random_bot_elo: float = Field(800.0, description="Rating of random_bot, the fixed anchor.")
    chaos_bot_elo: float = Field(900.0, description="Initial rating of chaos_bot.")
    greedy_bot_elo: float = Field(
        1100.0,
        description="Initial rating of greedy_bot (measured between chaos_bot and dumb_bot, "
        "docs/results/diplomacy_bench.md).",
    )
    dumb_bot_elo: float = Field(
        1300.0,
        description="Initial rating of dumb_bot (DumbBot, the field's standard baseline; measured "
        "about 500 above random_bot in a mixed table, docs/reference/dumb_bot.md).",
    )
    eval_every: int = Field(
        50, ge=1, description="Run the async evaluator every N steps (on the newest checkpoint)."
    )
    eval_games: int = Field(
        7, ge=1, description="Evaluator games per gatekeeper (the challenger vs six clones)."
    )
    eval_all_baselines: bool = Field(
        True,
        description="Add every baseline (base_model too) to the evaluator's gatekeepers: random, "
        "best, recent and the benchmark suite's opponents, which are always played "
        "(docs/results/diplomacy_bench.md).",
    )
    eval_greedy: bool = Field(
        True, description="Learned agents play their most probable orders in evaluations."
    )
    exploiters: ExploitersSection = ExploitersSection()  # off by default (the spec's recipe)


class LLMSection(Section):
    """LLM agents: base model, LoRA adapters per agent, generation backend (docs/guides/llm.md)."""

    backend: Literal["hf", "openai"] = Field(
        "hf",
        description="hf: transformers+peft in this process; openai: an OpenAI-compatible "
        "server (vllm serve, or leaguezero llm serve) at `endpoint`.",
    )
    base_model: str | None = Field(
        None,
        description="Local folder of the base model and tokenizer (nothing is downloaded); "
        "pretrained-llm: the base shipped with the package (the diplomacy commands resolve it).",
    )
    served_model_name: str | None = Field(
        None, description="The base model's name on the server (null: ask /v1/models)."
    )
    endpoint: str = Field(
        "http://127.0.0.1:8000", description="Server URL for backend openai (no /v1 suffix)."
    )
    device: str = Field("cpu", description="hf backend device: cpu or cuda.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="hf base weights (auto: bf16 on CUDA and bf16 CPUs, else fp32)."
    )
    max_loras: int = Field(
        8,
        ge=1,
        description="Adapters resident at once (vLLM --max-loras); more distinct opponents than "
        "slots fall back to cluster seating.",
    )
    max_lora_rank: int = Field(16, ge=1, description="Largest adapter rank (vLLM --max-lora-rank).")
    lora_rank: int = Field(8, ge=1, description="Rank of new adapters (<= max_lora_rank).")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA alpha (scale = alpha / rank).")
    target_modules: list[str] | Literal["auto"] = Field(
        "auto",
        description="Module names LoRA wraps. auto: the model family's projections, by the "
        "model's config.model_type (Llama, Qwen2, Qwen3, Mistral, Gemma: q_proj, k_proj, "
        "v_proj, o_proj, gate_proj, up_proj, down_proj; docs/guides/llm.md); or a list of names, "
        "each checked against the model (a missing one stops the run with the modules found).",
    )
    system_prompt: str | None = Field(
        None,
        description="A system turn before the prompt's user turn in the chat template (null: "
        "none, so the template's own default if any, e.g. Qwen2.5's or SmolLM2's; built bases "
        "render as before; diplomacy: the project's Diplomacy instructions, for real instruct "
        "models, docs/guides/llm.md). Ignored by a model without a chat template.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        {},
        description="Extra arguments of the tokenizer's apply_chat_template, e.g. "
        "{enable_thinking: false} so Qwen3 answers without thinking first. Ignored by a "
        "model without a chat template.",
    )
    max_new_tokens: int = Field(
        256, ge=1, description="Completion budget per seat and phase (orders + END)."
    )
    temperature: float = Field(
        1.0,
        ge=0,
        description="Sampling temperature of LLM folders named on the command line (diplomacy "
        "eval, bench, play; 0 is greedy); training games sample at train.temperature.",
    )
    mode: Literal["generate", "constrained"] = Field(
        "generate",
        description="generate: free text, parsed (an illegal order is counted and the unit "
        "holds); constrained: the same text decoded so every order is legal, the model "
        "choosing among legal continuations (GRPO trains that policy; docs/guides/llm.md).",
    )
    adapters_dir: str = Field(
        "adapters", description="Folder (under the run) for published hero adapter versions."
    )
    format_penalty: float = Field(
        0.0,
        ge=0,
        description="GRPO reward term: the hero's score minus this times its invalid and "
        "missing orders per completion (0: off).",
    )

    @property
    def sampling(self) -> SamplingBackend:
        """``backend`` as a :class:`SamplingBackend` (the one place it is read)."""
        return SAMPLING_BACKENDS[self.backend]

    @model_validator(mode="after")
    def _rank_fits(self) -> LLMSection:
        if self.lora_rank > self.max_lora_rank:
            raise ValueError(
                f"lora_rank {self.lora_rank} exceeds max_lora_rank {self.max_lora_rank}"
            )
        return self


class BenchSection(Section):
    """The fixed benchmark suite (leaguezero diplomacy bench; docs/results/diplomacy_bench.md)."""

    games: int = Field(
        301,
        ge=1,
        description="Games per benchmark opponent: 301 (a multiple of 7: every power equally "
        "often) puts a win rate's 95% interval within 0.057 of it at 0.5 and 0.040 at parity, "
        "so an agent that far from a floor gets a verdict; fewer games leave more inconclusive.",
    )
    checkpoints: list[str] = Field(
        default_factory=list,
        description="Frozen agents (policy checkpoints, LLM folders) benchmarked after the bots, "
        "floor: parity (1/7).",
    )


class DiplomacyConfig(Section):
    """No-press Diplomacy rollouts and tournaments (docs/reference/design.md#league-training)."""

    run: RunSection = RunSection()
    max_years: int = Field(
        10,
        ge=1,
        le=200,
        description="Game years played (1901 .. 1900+max_years) before a game is stopped as a "
        "draw; random play almost never ends on its own.",
    )
    win_bonus: float = Field(
        5.0, ge=0, description="Score bonus for a single centre leader at or above the threshold."
    )
    winner_threshold_sc: int = Field(
        10, ge=1, le=34, description="Centres the single leader needs to earn the win bonus."
    )
    solo_sc: int = Field(
        18,
        ge=1,
        le=34,
        description="Centres that make a solo in sum-of-squares scoring (the engine's victory).",
    )
    initial_rating: float = Field(1000.0, description="Rating of an agent not yet rated.")
    max_unique_opponents: int = Field(
        6,
        ge=1,
        le=6,
        description="Cluster sampling: at most this many distinct opponents, cloned across the "
        "six other seats ([Hero, A, A, A, B, B, B] for 2).",
    )
    games_dir: str | None = Field(
        "runs/diplomacy/games",
        description="Folder for finished games (the engine's saved-game JSON); null disables.",
    )
    record_observations: bool = Field(
        True, description="Store the hero's board observation in each trajectory step."
    )
    model: ModelSection = ModelSection()
    train: TrainSection = TrainSection()
    league: LeagueSection = LeagueSection()
    llm: LLMSection = LLMSection()
    bench: BenchSection = BenchSection()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return move_renamed_keys(data, RENAMED_KEYS, RETIRED_KEYS)

    @model_validator(mode="after")
    def _sampler_weight_comparable(self) -> DiplomacyConfig:
        # The sampler weight compares two log-probs of one distribution. The in-process
        # sampler and llm serve report them at the sampling temperature, vLLM (raw_logprobs,
        # its default) at 1; a config cannot tell the servers apart: refused, not mis-weighted.
        train = self.train
        if not train.hero.llm or train.temperature == 1.0 or train.is_correction == "none":
            return self
        if self.llm.sampling.shared_server:
            raise ValueError(
                f"train.temperature {train.temperature} with llm.backend openai and "
                f"train.is_correction {train.is_correction}: vLLM reports raw (temperature-1) "
                "log-probs, so the sampler weight would compare different distributions; use "
                "train.temperature 1, or train.is_correction none (the trainer still scores at "
                "the sampling temperature; the mismatch statistics are then not meaningful)"
            )
        if train.score_temperature == "one":
            raise ValueError(
                f"train.temperature {train.temperature} with train.score_temperature one and "
                f"train.is_correction {train.is_correction}: the sampler reports log-probs at "
                "the sampling temperature, the trainer would score at 1; use "
                "train.score_temperature sampling or train.is_correction none"
            )
        return self
