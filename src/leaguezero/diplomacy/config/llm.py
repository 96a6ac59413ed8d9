"""The ``llm`` section of the Diplomacy config: base model, LoRA adapters, generation
backend, and :class:`SamplingBackend`, ``llm.backend`` read once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from leaguezero.common.config import Section


@dataclass(frozen=True)
class SamplingBackend:
    """``llm.backend`` read once: where LLM seats are sampled."""

    name: str  # "hf" | "openai"
    shared_server: bool  # an OpenAI-compatible server every process and node can reach


SAMPLING_BACKENDS = {
    "hf": SamplingBackend("hf", shared_server=False),
    "openai": SamplingBackend("openai", shared_server=True),
}


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
