"""transformers + peft in-process: one base model, one LoRA adapter per agent, by name.

:class:`HFBackend` holds a causal LM wrapped by peft with any number of named LoRA adapters.
A generation call may mix adapters row by row (peft's ``adapter_names=[...]``; ``__base__`` is
the bare model), so the seven seats of a game, or many games, go through one forward pass per
token (a batch of one adapter takes peft's faster plain path). Sampling is our own loop over
the KV cache (:mod:`.sampler`) rather than ``model.generate``.

For training, :meth:`HFBackend.logprobs` returns differentiable per-token log-probs of given
completions under one adapter, and :meth:`HFBackend.trainable_parameters` makes that adapter
(and nothing else) require gradients, so an optimizer step updates only the hero's adapter.

:class:`HFBackend` is the one class callers see; its methods live by concept in sibling
modules, as mixins sharing its lock, its peft model and its adapter state: the named adapters
(:mod:`.hf_adapters`: add, load, unload, save, which one trains), generation
(:mod:`.hf_sampling`), training log-probs (:mod:`.hf_logprobs`); LoRA shapes and target
modules are :mod:`.hf_lora`. This module builds the model (dtype, packing, the CPU paths of
:mod:`.cpu_speed`) and runs its forward pass.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import replace

import torch

from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.model.cpu_speed import (
    fast_lora,
    float32_adapters,
    float32_head,
    pack_linears,
    resolve_dtype,
    use_cpu_attention,
)
from leaguezero.diplomacy.llm.model.gguf import base_model_folder
from leaguezero.diplomacy.llm.model.hf_adapters import PLACEHOLDER, AdapterSlots
from leaguezero.diplomacy.llm.model.hf_logprobs import LogProbs
from leaguezero.diplomacy.llm.model.hf_lora import LoraSettings, lora_config, resolve_target_modules
from leaguezero.diplomacy.llm.model.hf_sampling import Sampling
from leaguezero.diplomacy.llm.model.prefix_cache import PrefixCache
from leaguezero.diplomacy.llm.model.sampler import cache_argument
from leaguezero.diplomacy.llm.orders.constrained import ConstraintCompiler


class HFBackend(AdapterSlots, Sampling, LogProbs):
    """A base causal LM with named LoRA adapters (see module doc). Thread-safe (one lock).

    ``model``: a transformers causal LM (not yet peft-wrapped); ``tokenizer``: its fast
    tokenizer; ``model_name``: how the base model is called in requests (``/v1/models``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        lora: LoraSettings | None = None,
        model_name: str = "base",
        device: str | torch.device = "cpu",
        max_batch_size: int = 16,
        bf16_autocast: bool = False,
    ) -> None:
        from peft import get_peft_model

        lora = lora or LoraSettings()
        self.lora = replace(lora, target_modules=resolve_target_modules(model, lora.target_modules))
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        # Forward passes in bfloat16 (weights and LoRA stay float32), see LLMSection.
        self.bf16_autocast = bf16_autocast
        self._lock = threading.RLock()
        self._trainable: str | None = None
        self._pending: set[str] = set()  # adapters being loaded (see load_adapter)
        model.to(self.device)
        float32_head(model)  # float32 logits from any body, or only those asked for (.cpu_speed)
        # A decoding step's attention in float32 matmuls on a CPU (.cpu_speed).
        self.cpu_attention = use_cpu_attention(model) if self.device.type == "cpu" else False
        # Sampling's KV cache holds float32 for it (twice a bf16 cache's bytes: the memory
        # plan counts them, train.llm_memory).
        self.float32_cache = self.cpu_attention and model.dtype != torch.float32
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        with warnings.catch_warnings():
            # peft (0.21) reads transformers' deprecated `is_gradient_checkpointing`; the
            # FutureWarning is about their code, not ours, and says nothing a user can act on.
            deprecated = "`is_gradient_checkpointing` is deprecated"
            warnings.filterwarnings("ignore", message=deprecated, category=FutureWarning)
            self.model = get_peft_model(model, lora_config(self.lora), adapter_name=PLACEHOLDER)
        float32_adapters(self.model)  # LoRA weights are master weights: float32 on any base
        # The frozen base's linears use prepacked oneDNN weights on a CPU (.cpu_speed).
        self.packed_linears = pack_linears(self.model) if self.device.type == "cpu" else 0
        fast_lora(self.model)  # LoRA in the base's dtype, adapters mixed per row (.cpu_speed)
        self.model.eval()  # always: no dropout, and peft only mixes adapters in eval mode
        self._freeze()
        eos = getattr(model.config, "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = eos_ids
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(eos_ids, default=0)
        self.eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else self.pad_id
        self._compiler: ConstraintCompiler | None = None  # built on first constrained use
        self._compiler_lock = threading.Lock()  # not the model's lock: servers compile beside it
        # Constrained decoding feeds a run of forced tokens in one forward pass; False: one
        # pass per token (the same completions; the reference of a test and the benchmark).
        self.jump_forward = True
        self.cache_arg = cache_argument(model)
        # Sampling's KV cache grows in place instead of concatenating every step (.sampler);
        # False: the model's own cache (the reference of a test and the benchmark).
        self.growing_cache = True
        # Sampling computes a constrained row's allowed tokens' logits only (.cpu_speed);
        # False: the full head every step (the reference of a test).
        self.select_logits = True
        # The prompt prefix every seat shares, prefilled once per adapter version
        # (.prefix_cache; with the growing cache only); None: every row prefills it.
        self.prefix_cache: PrefixCache | None = PrefixCache()
        # Prompts prefilled packed, without padding, attention row by row (.packed_prefill:
        # cpu_attention's); False: one left-padded batch (the reference of a test and the
        # benchmark).
        self.packed_prefill = self.cpu_attention
        self.gradient_checkpointing = False  # see enable_gradient_checkpointing

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        lora: LoraSettings | None = None,
        model_name: str | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        max_batch_size: int = 16,
        bf16_autocast: bool = False,
    ) -> HFBackend:
        """Load a base model and tokenizer from a local folder or a ``.gguf`` file (converted
        once into a cached folder, :mod:`.gguf`); never downloads. ``dtype``: the base weights'
        (``auto``: bfloat16 on CUDA and on CPUs with bf16 units, else float32,
        :func:`.cpu_speed.resolve_dtype`); adapters are float32 whatever it is."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = base_model_folder(path)
        if not (folder / "config.json").exists():
            raise LLMError(
                f"base model folder {folder} has no config.json; pass a local folder saved with "
                "save_pretrained (model and tokenizer files) or a .gguf file; nothing is "
                "downloaded"
            )
        torch_dtype = getattr(torch, resolve_dtype(dtype, device))
        model = AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=torch_dtype
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return cls(
            model,
            tokenizer,
            lora=lora,
            model_name=model_name or str(path),
            device=device,
            max_batch_size=max_batch_size,
            bf16_autocast=bf16_autocast,
        )

    def _forward(self, **kwargs):
        """One forward pass of the peft model (under bf16 autocast when configured)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16_autocast):
            return self.model(**kwargs)

    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids, as generation and :meth:`logprobs` both see them."""
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
