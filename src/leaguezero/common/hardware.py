"""What this machine's processor can do fast: one answer for every dtype choice in the package."""

from __future__ import annotations

import functools

import torch

__all__ = ["cpu_has_native_bf16", "onednn_bf16_supported"]


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX tiles or AVX-512 BF16; torch's own
    CPU probe). Without them oneDNN emulates bf16 and float32 is faster."""
    cpu = torch.cpu
    return bool(
        getattr(cpu, "_is_amx_tile_supported", lambda: False)()
        or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
    )


@functools.cache
def onednn_bf16_supported() -> bool:
    """Whether oneDNN runs bfloat16 kernels here at all (AVX-512 BW/VL/DQ, AVX-NE-CONVERT or
    AMX; oneDNN's own probe). Without them its bf16 ops raise (``mkldnn_reorder_linear_weight:
    bf16 path needs ...`` on an AVX2-only CPU) and bf16 must take torch's plain kernels."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
