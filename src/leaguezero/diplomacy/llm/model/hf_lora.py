"""LoRA settings of new adapters and the modules they wrap, resolved per model family."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from leaguezero.diplomacy.llm.client import LLMError

# The seven projections of Llama-family decoders (attention q/k/v/o, MLP gate/up/down).
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# What ``target_modules="auto"`` wraps, by the model's ``config.model_type``; a type not listed
# gets the Llama projections if it has them all.
FAMILY_TARGETS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"), LLAMA_PROJECTIONS
    ),
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
}


@dataclass
class LoraSettings:
    """LoRA shape of new adapters and the largest rank a loaded one may have.

    ``target_modules``: module names (peft's suffix match) or ``"auto"``, resolved per model
    family by :func:`resolve_target_modules` when the backend is built.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "v_proj"])
    max_lora_rank: int = 16


def _linear_names(model: torch.nn.Module) -> list[str]:
    """Full names of ``model``'s linear layers (what LoRA can wrap)."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"
    ]


def resolve_target_modules(model: torch.nn.Module, targets: Sequence[str] | str) -> list[str]:
    """The LoRA target modules of ``model``: ``"auto"`` resolved by ``config.model_type``
    (:data:`FAMILY_TARGETS`), each name checked to match one of its linear layers (as peft
    matches: the full name or its last dotted parts). Raises :class:`LLMError` (one line, with
    the model type and the linear modules found) for a name that matches none.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None) or "unknown"
    linear = _linear_names(model)
    leaves = sorted({name.rsplit(".", 1)[-1] for name in linear})
    if isinstance(targets, str) and targets != "auto":
        targets = [targets]
    if targets == "auto":
        family = FAMILY_TARGETS.get(model_type)
        if family is None and set(LLAMA_PROJECTIONS) <= set(leaves):
            family = LLAMA_PROJECTIONS
        if family is None:
            raise LLMError(
                f"no automatic LoRA targets for model type {model_type!r}; set "
                f"llm.target_modules to some of its linear modules: {', '.join(leaves)}"
            )
        targets = list(family)
    targets = list(targets)
    missing = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in linear)]
    if missing or not targets:
        raise LLMError(
            f"LoRA target modules {', '.join(missing) or '(none)'} not found in this "
            f"{model_type!r} model; its linear modules: {', '.join(leaves)}"
        )
    return targets


def lora_config(settings: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
