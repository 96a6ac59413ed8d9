"""What this machine's processor can do fast: one answer for every dtype choice in the package."""

from __future__ import annotations

import functools

import torch

__all__ = ["cpu_has_native_bf16"]


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX tiles or AVX-512 BF16; torch's own
    CPU probe). Without them oneDNN emulates bf16 and float32 is faster."""
    cpu = torch.cpu
    return bool(
        getattr(cpu, "_is_amx_tile_supported", lambda: False)()
        or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
    )
