"""How many records an LLM hero's backward pass may hold: sized to the model and a budget.

A GRPO step recomputes each record's log-probs with gradients; what one record costs is the
activations its forward keeps for the backward pass (per token, per layer, per hidden unit)
plus its answer positions' logits (:meth:`~leaguezero.diplomacy.llm.model.hf_backend.HFBackend.
logprobs` never builds the whole ``[B, L, V]``). Measured on SmolLM2-135M-Instruct (30 layers,
hidden 576, vocabulary 49,152; a 549-token prompt and a 31-token answer; float32, one thread;
``python benchmarks/llm_memory.py``, and passes of 1, 4 and 8 records): 1.4-1.6 GB a
record when the activations are kept, 0.5 GB with gradient checkpointing plus 0.6 GB a pass,
i.e. about 140 and 50 bytes per token x layer x hidden unit, in float32; a bf16 base keeps
activations and KV entries at half that (the answer logits stay float32: the head computes in
float32, :mod:`~leaguezero.diplomacy.llm.model.cpu_speed`). :func:`auto_records_per_pass`
divides what the budget leaves after the process as it is (model, adapters, optimizer) and the
sampling's KV cache by that cost (at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass

# Bytes kept per token x layer x hidden unit for the backward pass (see the module doc).
BYTES_KEPT = 140.0
# 50 from the slope of 1/4/8-record passes, 73 from a 2-record pass's total: the larger one
# less a margin, since the first whole GRPO step at 50 peaked 0.9 GB over its budget.
BYTES_KEPT_CHECKPOINTED = 65.0
LATE_PROMPT_FACTOR = 1.4  # a late-game prompt's length over the opening's (2-3 year games)
SAMPLING_SHARE = 0.35  # of the budget, at most, for one sampling batch (KV cache + prefill)
# Logits, their float copy, log-softmax and gradients of one answer position, per vocab entry.
BYTES_PER_ANSWER_LOGIT = 16.0
# Per pass, whatever its size (allocator, masks, the head's output): the intercept of the
# measured 1 / 4 / 8-record passes with checkpointing (1.1 / 3.1 / 5.1 GB over the loaded model).
PASS_OVERHEAD_BYTES = 0.6e9
GB = 1e9


@dataclass(frozen=True)
class PassPlan:
    """The sizing's inputs and result, logged once per run so a user can check it."""

    records_per_pass: int
    sampling_rows: int  # rows one in-process sampling batch may hold (0: sampled elsewhere)
    budget_gb: float
    resident_gb: float
    sampling_gb: float
    record_gb: float
    prompt_tokens: int
    checkpointing: bool

    def line(self) -> str:
        return (
            f"records per backward pass: {self.records_per_pass} (train.max_memory_gb "
            f"{self.budget_gb:g}: the process holds {self.resident_gb:.2f} GB, "
            + (
                f"sampling ~{self.sampling_gb:.2f} GB in batches of {self.sampling_rows} rows"
                if self.sampling_rows
                else "sampling in the server"
            )
            + f", a record (opening prompt ~{self.prompt_tokens} tokens, later ones longer) "
            f"~{self.record_gb:.2f} GB"
            + (", gradient checkpointing" if self.checkpointing else "")
            + ")"
        )


def auto_records_per_pass(
    model_config,
    *,
    budget_gb: float,
    resident_bytes: float,
    prompt_tokens: int,
    answer_tokens: int,
    sampling_rows: int,
    checkpointing: bool,
    activation_bytes: int = 4,
    kv_bytes: int | None = None,
) -> PassPlan:
    """Records per backward pass that keep the process within ``budget_gb``.

    ``model_config``: the base model's transformers config (layers, hidden size, vocabulary,
    key/value heads); ``resident_bytes``: the process's RSS now; ``prompt_tokens`` /
    ``answer_tokens``: the opening prompt's and a typical answer's lengths (a late prompt is
    :data:`LATE_PROMPT_FACTOR` times the opening's); ``sampling_rows``: rows one in-process
    sampling batch would hold (0: a server samples). A row's KV cache and its prefill's
    transient activations (one layer's attention scores and MLP at a time) are capped at
    :data:`SAMPLING_SHARE` of the budget (at least one game's seven seats); the rest, less
    what the process holds, goes to the backward passes. ``activation_bytes``: the size of
    one activation (4: float32, 2: a bf16 base), which scales the activation terms;
    ``kv_bytes``: of one cached key or value (default ``activation_bytes``; 4 where a bf16 base
    samples over a float32 cache, :mod:`~leaguezero.diplomacy.llm.model.cpu_speed`).
    """
    layers = int(getattr(model_config, "num_hidden_layers", 1))
    hidden = int(getattr(model_config, "hidden_size", 1))
    vocab = int(getattr(model_config, "vocab_size", 1))
    heads = int(getattr(model_config, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(model_config, "num_key_value_heads", heads) or heads)
    head_dim = int(getattr(model_config, "head_dim", None) or hidden // heads)
    # Later phases' prompts are longer than the opening's (more units, builds): a pass sorted
    # by length holds the longest records together.
    tokens = int(LATE_PROMPT_FACTOR * prompt_tokens) + answer_tokens
    scale = activation_bytes / 4.0
    kept = (BYTES_KEPT_CHECKPOINTED if checkpointing else BYTES_KEPT) * scale
    record = tokens * layers * hidden * kept + answer_tokens * vocab * BYTES_PER_ANSWER_LOGIT
    intermediate = int(getattr(model_config, "intermediate_size", 4 * hidden))
    # Per row: keys and values of every layer and token, and the prefill's largest
    # transient (one layer's attention scores, MLP and projections).
    kv = tokens * layers * 2 * kv_heads * head_dim * float(kv_bytes or activation_bytes)
    prefill = float(activation_bytes) * (
        heads * tokens * tokens + tokens * (3 * intermediate + 6 * hidden)
    )
    if sampling_rows:
        fit = int(SAMPLING_SHARE * budget_gb * GB // (kv + prefill))
        sampling_rows = max(7, min(sampling_rows, fit))
    sampling = sampling_rows * (kv + prefill)
    free = budget_gb * GB - resident_bytes - sampling - PASS_OVERHEAD_BYTES
    count = max(1, int(free // record))
    return PassPlan(
        records_per_pass=count,
        sampling_rows=sampling_rows,
        budget_gb=budget_gb,
        resident_gb=resident_bytes / GB,
        sampling_gb=sampling / GB,
        record_gb=record / GB,
        prompt_tokens=prompt_tokens,
        checkpointing=checkpointing,
    )


def hero_pass_plan(backend, cfg, *, sampled_here: bool) -> PassPlan:
    """The LLM hero's plan: ``train.records_per_pass: 0`` sized to ``backend``'s model and
    ``train.max_memory_gb``, from the longest opening prompt as this model tokenises it (in the
    run's chat format); ``sampled_here``: the games are sampled in this process (a group's
    seats share its batches), not by a server."""
    import psutil

    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.llm.orders.prompt import build_prompt
    from leaguezero.diplomacy.llm.runtime import chat_format

    env = DiplomacyEnv(max_years=1)
    render = chat_format(cfg.llm).renderer(backend.tokenizer)
    prompt_tokens = max(
        len(backend.encode(render(build_prompt(env, p, env.legal_orders(p))))) for p in POWERS
    )
    return auto_records_per_pass(
        backend.model.config,
        budget_gb=cfg.train.max_memory_gb,
        resident_bytes=psutil.Process().memory_info().rss,
        prompt_tokens=prompt_tokens,
        answer_tokens=min(cfg.llm.max_new_tokens, 64),
        sampling_rows=min(64, 7 * cfg.train.group_size) if sampled_here else 0,
        checkpointing=cfg.train.gradient_checkpointing,
        activation_bytes=next(backend.model.get_base_model().parameters()).element_size(),
        kv_bytes=4 if getattr(backend, "float32_cache", False) else None,
    )
