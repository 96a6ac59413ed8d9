"""The base model's arithmetic at the CPU's rate: dtype, prepacked linears, LoRA, the head.

Measured on a 135M Llama (SmolLM2), one core of the 2-core machine (AVX-512 BF16 and AMX;
``benchmarks/llm_tokens.py`` measures the limit again on every run, docs/guides/llm.md):

- **bfloat16 weights**: a prompt's matmuls run ~7x faster than in float32 where the CPU has
  bf16 units (AMX or AVX-512 BF16); without them oneDNN emulates bf16 and float32 is the
  right choice. :func:`resolve_dtype` turns ``llm.dtype: auto`` into one of the two (bfloat16
  on CUDA). LoRA weights stay float32 whatever the base's dtype (:func:`float32_adapters`):
  they are the trained master weights.
- **Prepacked weights** (bf16 only, :func:`pack_linears`): ``F.linear`` on a CPU reorders the
  weight into oneDNN's blocked layout on every call; at a decoding step's few rows that is
  half the time (a 576 x 1536 bf16 projection: 137 us plain, 70 us packed). :class:`PackedLinear`
  keeps the packed copy (one more copy of the base weights: 270 MB for SmolLM2) for every
  forward pass; its backward is the plain ``grad @ W`` (the base is frozen: no weight
  gradient). Packed and plain agree to rounding (oneDNN may block the sum differently).
- **LoRA in the base's dtype** (:func:`fast_lora`): peft adds a float32 adapter to a bf16
  layer by casting the whole input to float32, promoting the output to float32, scaling it and
  casting it back: a 7-row prefill ran 2.7x slower with the hero's adapter than without it.
  The swapped layers compute the same ``base(x) + scale * B(A(x))`` in the base layer's dtype
  from the float32 master weights (bf16 compute, float32 master weights and gradients, as
  mixed-precision training does), in float32 at a decoding step's few rows, and mix adapters
  row by row as peft's ``adapter_names`` does; at float32 it is peft's arithmetic. Dropout,
  DoRA and the other LoRA variants go to peft's own forward.
- **Attention of a few queries in float32 matmuls** (:func:`use_cpu_attention`): torch's CPU
  flash-attention kernel takes ~0.7 ms for one decoding query over a 480-token cache (one
  head group's work is a few microseconds), 30 layers a step: a fifth of a decoding step on
  the Zen 4 machine. A pass of at most :data:`SHORT_QUERY` queries without gradients computes
  ``softmax(q K^T) V`` as two float32 batched matmuls over a float32 copy of the cache (the
  growing cache keeps its keys and values in float32 for it, :mod:`.sampler`); everything else
  (prompts, training) goes to transformers' ``sdpa``. Both accumulate in float32 from the same
  bf16-rounded keys and values.
- **Logits in float32**: a bf16 head rounds logits of magnitude 16-32 to steps of 0.125, the
  largest error of a bf16 log-prob. :func:`float32_head` gives the head a float32 copy of its
  weight (113 MB for SmolLM2's tied 49k x 576 embedding), so only the body's hidden states are
  bf16. A constrained row needs only its allowed tokens' logits (the masked log-prob is a
  softmax over them: exact), so the sampler computes those alone (:meth:`Float32Head.logits`)
  and a forced token none: the full head reads 113 MB a decoding step (~10 ms at one core's
  bandwidth) and at 28 rows is a quarter of the step.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import nn

from leaguezero.common.hardware import cpu_has_native_bf16, onednn_bf16_supported
from leaguezero.diplomacy.llm.model import packed_prefill

__all__ = [
    "PackedLinear",
    "fast_lora",
    "float32_adapters",
    "float32_head",
    "pack_linears",
    "resolve_dtype",
    "use_cpu_attention",
]


# What ``auto`` resolves to when set (e.g. ``float32``: the same numbers on every machine, as
# the test suite pins it); unset: by the device (resolve_dtype).
AUTO_DTYPE_ENV = "LEAGUEZERO_LLM_DTYPE"


def resolve_dtype(dtype: str, device: str | torch.device) -> str:
    """``auto``: ``$LEAGUEZERO_LLM_DTYPE`` if set, else ``bfloat16`` on CUDA and on a CPU with
    bf16 units, else ``float32``; any other name is returned as it is."""
    if dtype != "auto":
        return dtype
    pinned = os.environ.get(AUTO_DTYPE_ENV)
    if pinned:
        if pinned not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"{AUTO_DTYPE_ENV}={pinned!r}: expected float32, bfloat16 or float16")
        return pinned
    native = {"cuda": True, "cpu": cpu_has_native_bf16()}.get(torch.device(device).type, False)
    return "bfloat16" if native else "float32"


def float32_adapters(model: nn.Module) -> None:
    """Every LoRA weight of a peft model in float32 (peft gives new adapters the base
    layer's dtype); the base weights keep theirs."""
    for name, param in model.named_parameters():
        if "lora_" in name and param.dtype != torch.float32:
            param.data = param.data.float()


class Float32Head(nn.Module):
    """An output head that computes in float32 from a lower-precision body (module doc), and
    can hand back the hidden states instead (:attr:`hidden_only`) so a sampler computes the
    logits of the tokens it needs only (:meth:`logits`)."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.linear = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
        # A float32 head keeps its own (tied) weight: .float() of a float32 tensor is itself.
        self.linear.weight = nn.Parameter(head.weight.detach().float(), requires_grad=False)
        if head.bias is not None:
            self.linear.bias = nn.Parameter(head.bias.detach().float(), requires_grad=False)
        self.hidden_only = False

    @property
    def weight(self) -> torch.Tensor:
        return self.linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() if self.hidden_only else self.linear(x.float())

    def logits(self, hidden: torch.Tensor, tokens: list[int] | None = None) -> torch.Tensor:
        """The logits of ``tokens`` only (all when None) from float32 hidden states ``[..., H]``
        (what :attr:`hidden_only` returned): the same numbers as the full head's columns, up to
        float32 summation order, at the cost of the rows asked for."""
        if tokens is None:
            return self.linear(hidden)
        index = torch.tensor(tokens, device=hidden.device)
        bias = None if self.linear.bias is None else self.linear.bias.index_select(0, index)
        return nn.functional.linear(hidden, self.linear.weight.index_select(0, index), bias)


def float32_head(model: nn.Module) -> bool:
    """Give a causal LM a :class:`Float32Head`: float32 logits from a bf16 or fp16 body (a
    float32 copy of the weight), and for a float32 model the same weight wrapped (no copy), so
    every sampler can ask for the logits of a constraint's allowed tokens only; True if it did.
    Only for a plain ``nn.Linear`` head reached by ``get_output_embeddings``; call before peft
    wraps the model."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if get is not None else None
    if type(head) is not nn.Linear:
        return False
    if head.weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return False
    model.set_output_embeddings(Float32Head(head))
    return True


class _PackedMatmul(torch.autograd.Function):
    """``x @ W.T`` with the packed weight; backward: ``grad @ W`` (W is frozen)."""

    @staticmethod
    def forward(ctx, x, packed, weight):
        ctx.save_for_backward(weight)
        return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return grad.to(weight.dtype) @ weight, None, None


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` (frozen, on the CPU) whose forward uses a prepacked oneDNN copy of its
    weight (module doc). Made by :func:`pack_linears` swapping the class of existing layers, so
    the module tree, names and state dict stay as they were."""

    _packed: torch.Tensor | None
    _packed_key: tuple | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if x.dtype != weight.dtype or weight.device.type != "cpu" or weight.requires_grad:
            return super().forward(x)
        key = (weight.data_ptr(), weight.dtype, weight._version)
        if getattr(self, "_packed_key", None) != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)
            self._packed_key = key
        if torch.is_grad_enabled() and x.requires_grad:
            out = _PackedMatmul.apply(x, self._packed, weight)
        else:
            out = torch.ops.mkldnn._linear_pointwise(x, self._packed, None, "none", [], "")
        if self.bias is not None:
            out = out + self.bias
        return out


def mkldnn_linear_available() -> bool:
    """Whether this torch has the oneDNN linear ops :class:`PackedLinear` uses and oneDNN runs
    bfloat16 on this CPU (an AVX2-only one has no bf16 path: its reorder raises)."""
    try:
        return (
            bool(torch.backends.mkldnn.is_available())
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and onednn_bf16_supported()
        )
    except (AttributeError, RuntimeError):
        return False


def pack_linears(model: nn.Module) -> int:
    """Swap every plain bfloat16 ``nn.Linear`` of ``model`` on the CPU for a
    :class:`PackedLinear`; returns how many. Float32 layers stay plain: packed float32 was
    1.8x faster at 7 rows but 1.2x slower at one (MKL's own small-matrix path), and a whole
    batch-1 generation measured slower, so nothing is claimed there. LoRA's own small linears
    are left plain (they train). Call after the model is peft-wrapped; adapters added later
    wrap packed layers."""
    if not mkldnn_linear_available():
        return 0
    count = 0
    for name, module in model.named_modules():
        if type(module) is not nn.Linear or "lora_" in name:
            continue
        weight = module.weight
        if weight.device.type != "cpu" or weight.dtype != torch.bfloat16:
            continue
        module.__class__ = PackedLinear
        count += 1
    return count


# Rows up to which FastLora computes the low-rank product in float32 (measured: 7 rows 25 us
# against bf16's 69; 64 rows 95 against 78).
SMALL_ROWS = 32


def _peft_lora_linear():
    from peft.tuners.lora.layer import Linear

    return Linear


def _forget_deleted(cache: dict, adapters) -> None:
    """Drop a ``FastLora`` cache's entries (keyed ``(adapter, dtype)``) of adapters no longer in
    ``adapters``: an entry holds its adapter's parameters and casts (~40 MB an adapter over
    SmolLM2's layers), and a league run loads each new checkpoint under a new name, so without
    this every adapter it evicted stayed resident."""
    for stale in [key for key in cache if key[0] not in adapters]:
        del cache[stale]


@functools.cache
def _fast_lora_class():
    base = _peft_lora_linear()

    class FastLora(base):
        """peft's ``lora.Linear`` with the forward of the module doc (class swapped in by
        :func:`fast_lora`; state dict, names and peft's adapter bookkeeping unchanged)."""

        def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            adapter_names = kwargs.get("adapter_names")
            if args or set(kwargs) - {"adapter_names", "alora_offsets"} or self.merged:
                return super().forward(x, *args, **kwargs)
            if kwargs.get("alora_offsets") is not None or self.disable_adapters:
                return super().forward(x, *args, **kwargs)
            if adapter_names is None:
                names = [n for n in self.active_adapters if n in self.lora_A]
                groups = [(n, None) for n in names]
            else:
                if len(adapter_names) != len(x):
                    return super().forward(x, *args, **kwargs)  # peft's own error
                rows: dict[str, list[int]] = {}
                for i, n in enumerate(adapter_names):
                    if n != "__base__" and n in self.lora_A:
                        rows.setdefault(n, []).append(i)
                groups = [(n, torch.tensor(r, device=x.device)) for n, r in rows.items()]
            for name, _ in groups:
                if name in self.lora_variant or not isinstance(
                    self.lora_dropout[name], nn.Identity
                ):
                    return super().forward(x, *args, **kwargs)
            result = self.base_layer(x)
            dtype, shape = result.dtype, result.shape
            grad = torch.is_grad_enabled()
            for name, index in groups:
                inp = x if index is None else x.index_select(0, index)
                rows = inp.numel() // inp.shape[-1]
                # A few rows (a decoding step): float32, whose tiny matmuls cost a third of
                # bf16's (oneDNN reorders each small bf16 operand); more: the base's dtype.
                low_dtype = torch.float32 if rows <= SMALL_ROWS else dtype
                a, bt = self._low_rank(name, low_dtype, grad)
                low = torch.nn.functional.linear(inp.to(low_dtype), a).reshape(rows, -1)
                if index is None and low_dtype == dtype:
                    flat = result.reshape(-1, shape[-1])
                    if grad:
                        result = torch.addmm(flat, low, bt).reshape(shape)
                    else:
                        flat.addmm_(low, bt)  # in place: no output-sized temporary
                    continue
                delta = (low @ bt).to(dtype).reshape((*inp.shape[:-1], shape[-1]))
                if index is None:
                    result = result + delta if grad else result.add_(delta)
                elif grad:
                    result = result.index_add(0, index, delta)
                else:
                    result.index_add_(0, index, delta)
            return result

        def _low_rank(
            self, name: str, dtype: torch.dtype, grad: bool
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """``A`` and ``(scale * B)^T`` (the scale folded into B: one [out, r] product instead
            of a pass over the output) in ``dtype``; without gradients cached until the
            weights change, the transpose contiguous (a decoding step would otherwise cast
            and scale them again in each of its ~200 layers; a contiguous [r, out] operand
            halves a one-row product's time)."""
            a, b, scale = self.lora_A[name].weight, self.lora_B[name].weight, self.scaling[name]
            if grad:
                return a.to(dtype), (b * scale).to(dtype).t()
            # The same parameter objects (an adapter re-added under its name has new ones),
            # unchanged since (in-place updates bump _version), at the same scale.
            key = (scale, a.data_ptr(), a._version, b.data_ptr(), b._version)
            cache = self.__dict__.setdefault("_low_rank_cache", {})
            hit = cache.get((name, dtype))
            if hit is None or hit[0] != key or hit[1] is not a or hit[2] is not b:
                _forget_deleted(cache, self.lora_A)
                bt = (b.detach() * scale).to(dtype).t().contiguous()
                hit = (key, a, b, a.detach().to(dtype), bt)
                cache[(name, dtype)] = hit
            return hit[3], hit[4]

    return FastLora


def fast_lora(model: nn.Module) -> int:
    """Swap every peft ``lora.Linear`` of ``model`` for ``FastLora`` (the subclass
    :func:`_fast_lora_class` builds); returns how many. Idempotent: call again after adapters are
    added (peft wraps new target layers only once, so an added adapter lands in the already swapped
    layers)."""
    base, fast = _peft_lora_linear(), _fast_lora_class()
    count = 0
    for module in model.modules():
        if type(module) is base:
            module.__class__ = fast
            count += 1
    return count


@functools.cache
def _sdpa():
    """transformers' sdpa attention function (imported once, not in every layer's call)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


# Queries up to which cpu_attention computes attention itself (a decoding step, a jump-forward
# run of forced tokens); longer passes (a prompt) go to sdpa's flash kernel.
SHORT_QUERY = 16
CPU_ATTENTION = "leaguezero_cpu_sdpa"


def cpu_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature (``AttentionInterface``): a short query
    without gradients in float32 matmuls (module doc), anything else by ``sdpa`` (keys and
    values in the query's dtype: the growing cache hands float32 ones)."""
    plan = packed_prefill.current_plan()
    if plan is not None:  # prompts packed without padding: row by row (.packed_prefill)
        return packed_prefill.attention(plan, module.layer_idx, query, scaling), None
    batch, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    mask = attention_mask
    short = (
        q_len <= SHORT_QUERY
        and not torch.is_grad_enabled()
        and query.device.type == "cpu"
        and not dropout
        and heads % kv_heads == 0
        and not any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "sinks"))
        and ((mask is None and q_len == 1) or (mask is not None and mask.dim() == 4))
        and (mask is None or (mask.shape[1] == 1 and mask.shape[-1] == kv_len))
    )
    if not short:
        if key.dtype != query.dtype:
            key, value = key.to(query.dtype), value.to(query.dtype)
        return _sdpa()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
            is_causal=is_causal, **kwargs,
        )  # fmt: skip
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # Heads h of one group share key head h // groups: [B, Hkv, G * q, D] against [B, Hkv, L, D].
    q = query.float().reshape(batch, kv_heads, groups * q_len, dim)
    scores = torch.matmul(q, key.float().transpose(-1, -2))  # [B, Hkv, G * q, L]
    scores = scores.view(batch, kv_heads, groups, q_len, kv_len).mul_(scale)
    if mask is not None:
        mask = mask[:, :, None]  # [B, 1, 1, q, L]
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # a fully masked row: zeros
    out = torch.matmul(probs.view(batch, kv_heads, groups * q_len, kv_len), value.float())
    out = out.view(batch, heads, q_len, dim).transpose(1, 2).to(query.dtype).contiguous()
    return out, None


def use_cpu_attention(model: nn.Module) -> bool:
    """Switch a transformers model that runs transformers' ``sdpa`` attention on the CPU to
    :func:`cpu_attention` (registered once under :data:`CPU_ATTENTION`, with sdpa's masks);
    True if it did. Call before peft wraps the model."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if next(model.parameters()).device.type != "cpu":
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(CPU_ATTENTION, cpu_attention)
    AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)
    try:
        model.set_attn_implementation(CPU_ATTENTION)
    except (ValueError, AttributeError):  # a model that does not take registered functions
        return False
    return config._attn_implementation == CPU_ATTENTION
