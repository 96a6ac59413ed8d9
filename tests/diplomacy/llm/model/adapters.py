"""A tiny model's backend with two random LoRA adapters, ``hero`` and ``other`` (the speed
paths' tests compare rows that mix them with the base)."""

from __future__ import annotations

import torch

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def two_adapter_backend(tiny_lm, dtype, **kwargs) -> HFBackend:
    """``tiny_lm``'s backend in ``dtype``, adapters of rank 4 on every projection whose B
    weights are random (an adapter at its init changes nothing)."""
    backend = HFBackend.from_pretrained(
        tiny_lm, lora=LoraSettings(rank=4, target_modules=ALL), dtype=dtype, **kwargs
    )
    for name, seed in (("hero", 1), ("other", 2)):
        backend.add_adapter(name)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for pname, param in backend.adapter_parameters(name).items():
                if "lora_B" in pname:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return backend
