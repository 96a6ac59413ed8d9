"""transformers + peft in-process: one base model, one LoRA adapter per agent, by name.

:class:`HFBackend` holds a causal LM wrapped by peft with any number of named LoRA adapters.
A generation call may mix adapters row by row (peft's ``adapter_names=[...]``; ``__base__`` is
the bare model), so the seven seats of a game, or many games, go through one forward pass per
token (a batch of one adapter takes peft's faster plain path). Sampling is our own loop over
the KV cache (:mod:`.sampler`) rather than ``model.generate``.

For training, :meth:`HFBackend.logprobs` returns differentiable per-token log-probs of given
completions under one adapter, and :meth:`HFBackend.trainable_parameters` makes that adapter
(and nothing else) require gradients, so an optimizer step updates only the hero's adapter.

Adapters are saved as peft folders (``adapter_config.json`` + ``adapter_model.safetensors``,
what ``vllm serve --enable-lora`` loads) plus ``leaguezero_adapter.json`` (schema version,
name, rank, prompt version), written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.diplomacy.llm.client import (
    Completion,
    GenerationRequest,
    LLMError,
    UnknownAdapterError,
    make_requests,
)
from leaguezero.diplomacy.llm.model.adapter_files import (
    adapter_folder_mode,
    folder_checksums,
    read_adapter_folder,
    share_with_group,
)
from leaguezero.diplomacy.llm.model.cpu_speed import (
    Float32Head,
    fast_lora,
    float32_adapters,
    float32_head,
    pack_linears,
    resolve_dtype,
    use_cpu_attention,
)
from leaguezero.diplomacy.llm.model.gguf import base_model_folder
from leaguezero.diplomacy.llm.model.prefix_cache import PrefixCache
from leaguezero.diplomacy.llm.model.sampler import cache_argument, growing_cache, sample_batch
from leaguezero.diplomacy.llm.orders.constrained import (
    ConstraintCompiler,
    OrderChoices,
    RegexMachine,
    replay_allowed,
)
from leaguezero.diplomacy.llm.orders.prompt import PROMPT_VERSION

# Padded tokens in one log-prob forward pass (see HFBackend.logprobs).
LOGPROB_BATCH_TOKENS = 8192


def _token_chunks(
    order: list[int], lengths: list[int], max_rows: int, *, equal: bool = False
) -> list[list[int]]:
    """``order`` (rows sorted by length; ``lengths`` in that order) cut into batches of at most
    ``max_rows`` rows and :data:`LOGPROB_BATCH_TOKENS` padded tokens (at least one row);
    ``equal``: rows of one length only, so a batch needs no padding mask (see
    :meth:`HFBackend.logprobs`)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    previous = None
    for index, length in zip(order, lengths, strict=True):
        if current and (
            len(current) >= max_rows
            or length * (len(current) + 1) > LOGPROB_BATCH_TOKENS
            or (equal and length != previous)
        ):
            chunks.append(current)
            current = []
        current.append(index)
        previous = length
    if current:
        chunks.append(current)
    return chunks


ADAPTER_SCHEMA_VERSION = 1
ADAPTER_META = "leaguezero_adapter.json"
BASE = "__base__"  # peft's row name for "no adapter"
_PLACEHOLDER = "lz_placeholder"  # keeps the model a PeftModel when no real adapter is loaded


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


def _lora_config(settings: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


class HFBackend:
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
            self.model = get_peft_model(model, _lora_config(self.lora), adapter_name=_PLACEHOLDER)
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

    # ------------------------------------------------------------------ adapters
    def list_adapters(self) -> list[str]:
        """Names of the loaded adapters (the placeholder is not one)."""
        # An adapter being loaded is not listed until all its weights are in.
        pending = self._pending
        return [n for n in self.model.peft_config if n != _PLACEHOLDER and n not in pending]

    def _check_name(self, name: str) -> None:
        if not name or name in (BASE, _PLACEHOLDER, self.model_name) or "." in name:
            raise ValueError(f"{name!r} cannot name an adapter (empty, reserved or has a '.')")

    def add_adapter(self, name: str) -> None:
        """A new adapter ``name`` with peft's initialisation (B = 0: it starts as the base)."""
        self._check_name(name)
        with self._lock:
            if name in self.model.peft_config:
                raise ValueError(f"adapter {name!r} is already loaded")
            self.model.add_adapter(name, _lora_config(self.lora))
            float32_adapters(self.model)
            self._freeze()

    def load_adapter(self, name: str, path: str | os.PathLike) -> None:
        """Load the adapter saved in folder ``path`` as ``name`` (a peft folder, ours or not).

        All or nothing: the folder is read and checked outside the lock
        (:func:`.adapter_files.read_adapter_folder`: regular files of ours only, size-bounded,
        safetensors only, every rank <= ``max_lora_rank``), then the adapter is created and
        filled under the lock and listed only once every LoRA weight is in; on any failure it
        is deleted again, so the name can be loaded later. Raises :class:`LLMError` (one line)
        or ``ValueError`` (bad or taken name).
        """
        from peft.utils import set_peft_model_state_dict

        self._check_name(name)
        files = read_adapter_folder(
            path,
            max_rank=self.lora.max_lora_rank,
            schema_version=ADAPTER_SCHEMA_VERSION,
            prompt_version=PROMPT_VERSION,
        )
        with self._lock:
            if name in self.model.peft_config:
                raise ValueError(f"adapter {name!r} is already loaded; names are immutable")
            self._pending.add(name)
            try:
                try:
                    self.model.add_adapter(name, files.config)
                    float32_adapters(self.model)  # before the weights go in: no bf16 rounding
                    result = set_peft_model_state_dict(self.model, files.weights, adapter_name=name)
                except (RuntimeError, ValueError, KeyError, TypeError) as err:
                    detail = str(err).strip().splitlines()[0][:160] if str(err) else ""
                    raise LLMError(
                        f"adapter {path} does not fit the base model ({type(err).__name__}: "
                        f"{detail})"
                    ) from None
                missing = [k for k in result.missing_keys if "lora_" in k and f".{name}." in k]
                if missing or result.unexpected_keys:
                    raise LLMError(
                        f"adapter {path}: {len(missing)} LoRA weight(s) missing (e.g. "
                        f"{(missing or ['-'])[0][:80]}), {len(result.unexpected_keys)} unexpected"
                    )
                self.model.to(self.device)
                self._freeze()
            except BaseException:
                if name in self.model.peft_config:
                    self.model.delete_adapter(name)
                raise
            finally:
                self._pending.discard(name)

    def unload_adapter(self, name: str) -> None:
        """Delete adapter ``name`` from the model."""
        with self._lock:
            if name not in self.list_adapters():
                raise UnknownAdapterError(f"adapter {name!r} is not loaded")
            self.model.delete_adapter(name)
            if self._trainable == name:
                self._trainable = None

    def save_adapter(self, name: str, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Save adapter ``name`` to folder ``path`` atomically (temp folder, then rename), with
        the files' sha256 in its meta and group-readable modes (:mod:`.adapter_files`)."""
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        folder = Path(path)
        if folder.exists() and not overwrite:
            raise FileExistsError(f"adapter folder {folder} exists; versioned names are immutable")
        with atomic_folder(folder, mode=adapter_folder_mode()) as tmp:
            with self._lock:
                if name not in self.list_adapters():
                    raise UnknownAdapterError(f"adapter {name!r} is not loaded")
                state = get_peft_model_state_dict(self.model, adapter_name=name)
                state = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
                config = self.model.peft_config[name]
                config.save_pretrained(str(tmp))
            save_file(state, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
            meta = {
                "schema_version": ADAPTER_SCHEMA_VERSION,
                "name": name,
                "base_model": self.model_name,
                "rank": config.r,
                "prompt_version": PROMPT_VERSION,
                "sha256": folder_checksums(tmp),
            }
            atomic_write_json(tmp / ADAPTER_META, meta)
            share_with_group(tmp)
        return folder

    def adapter_parameters(self, name: str) -> dict[str, torch.nn.Parameter]:
        """``{parameter name: parameter}`` of adapter ``name`` (its LoRA A and B matrices)."""
        marker = f".{name}."
        params = {n: p for n, p in self.model.named_parameters() if marker in n}
        if not params:
            raise UnknownAdapterError(f"adapter {name!r} is not loaded")
        return params

    def trainable_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """Make adapter ``name`` the only trainable one and return its parameters."""
        with self._lock:
            params = self.adapter_parameters(name)
            self._trainable = name
            self._freeze()
            return list(params.values())

    @contextlib.contextmanager
    def training(self, name: str):
        """Supervised training of adapter ``name`` alone (``llm imitate``): yields the peft
        model with ``name`` active and its parameters the only trainable ones."""
        with self._lock:
            self.trainable_parameters(name)
            with self._one_adapter(name):
                yield self.model
            self.model.eval()

    def enable_gradient_checkpointing(self) -> None:
        """Training log-probs recompute each layer's activations in the backward pass instead
        of keeping them: several times more records fit one pass (docs/guides/llm.md#memory).

        transformers checkpoints only in train mode; the backend is in eval mode otherwise
        (peft mixes adapters per row only there): see :meth:`_mode_for`. Non-reentrant
        checkpoints need no gradient on the frozen inputs.
        """
        kwargs = {"use_reentrant": False}
        base = self.model.get_base_model()
        if hasattr(base, "activation_checkpointing_enable"):  # the name since transformers 5.2x
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.gradient_checkpointing = True

    def _mode_for(self, differentiable: bool) -> None:
        """Train mode for a differentiable forward when checkpointing is on, eval otherwise.

        The backward pass recomputes each layer in the mode the model is in *then*, so train
        mode stays until the next non-differentiable call (sampling, scoring without grad)
        switches back; dropout is 0 in the LoRA layers and the decoders we train.
        """
        training = differentiable and self.gradient_checkpointing
        if self.model.training != training:
            self.model.train(training)
        if not training and self.gradient_checkpointing:
            self.model.base_model.set_adapter(_PLACEHOLDER, inference_mode=True)
            self._freeze()

    def _freeze(self) -> None:
        # peft marks adapters trainable as it adds them; only the designated one may be.
        marker = f".{self._trainable}." if self._trainable else None
        for pname, param in self.model.named_parameters():
            param.requires_grad_(marker is not None and marker in pname)

    def _row_name(self, adapter: str | None) -> str:
        if adapter is None or adapter == self.model_name:
            return BASE
        if adapter not in self.model.peft_config or adapter == _PLACEHOLDER:
            raise UnknownAdapterError(
                f"adapter {adapter!r} is not loaded; loaded: {', '.join(self.list_adapters())}"
            )
        return adapter

    @contextlib.contextmanager
    def _one_adapter(self, name: str, *, keep_active: bool = False):
        """Forward passes where every row uses ``name`` (the base for ``BASE``) through peft's
        plain path; its per-row ``adapter_names`` path made training log-probs 1.9x slower.

        ``keep_active``: ``name`` stays the active adapter afterwards, for a backward pass that
        recomputes the forward (gradient checkpointing); the per-row path used in sampling
        ignores the active adapter, and the next plain-path call sets its own.
        """
        try:
            if name == BASE:
                with self.model.disable_adapter():
                    yield
            else:
                self.model.base_model.set_adapter(name, inference_mode=name != self._trainable)
                try:
                    yield
                finally:
                    if not keep_active:
                        self.model.base_model.set_adapter(_PLACEHOLDER, inference_mode=True)
        finally:
            # Both flip requires_grad (peft re-activates adapters as trainable); only the
            # designated adapter may be, and before any backward pass (autograd skips a
            # parameter that stopped requiring grad after the forward).
            self._freeze()

    def _forward(self, **kwargs):
        """One forward pass of the peft model (under bf16 autocast when configured)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16_autocast):
            return self.model(**kwargs)

    # ---------------------------------------------------------------- generation
    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids, as generation and :meth:`logprobs` both see them."""
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def generate(
        self,
        prompts: Sequence[str],
        adapters: Sequence[str | None],
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: Sequence[OrderChoices | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, adapters mixed per row (see
        :mod:`~leaguezero.diplomacy.llm.client`); ``choices[i]``: row ``i`` is decoded under that
        constraint (:mod:`~leaguezero.diplomacy.llm.orders.constrained`)."""
        rows = make_requests(prompts, adapters, max_new_tokens, temperature, seed, choices)
        return self.generate_rows(rows)

    def generate_rows(self, rows: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete requests that may differ in adapter, length, temperature and seed."""
        # The server tokenises in its request threads (extra["prompt_ids"]), not in the batcher's.
        encoded = [list(r.extra.get("prompt_ids") or self.encode(r.prompt)) for r in rows]
        for r, ids in zip(rows, encoded, strict=True):
            if r.max_new_tokens < 1:
                raise ValueError("max_new_tokens must be at least 1")
            if len(ids) + r.max_new_tokens > self.max_positions:
                raise LLMError(
                    f"prompt of {len(ids)} tokens + {r.max_new_tokens} new tokens exceeds the "
                    f"model's {self.max_positions} positions"
                )
        # Similar lengths share a batch: less padding.
        order = sorted(range(len(rows)), key=lambda i: len(encoded[i]))
        out: list[Completion | None] = [None] * len(rows)
        with self._lock, torch.no_grad():
            self._mode_for(False)
            names = [self._row_name(r.adapter) for r in rows]
            for start in range(0, len(order), self.max_batch_size):
                chunk = order[start : start + self.max_batch_size]
                done = self._sample(
                    [rows[i] for i in chunk], [encoded[i] for i in chunk], [names[i] for i in chunk]
                )
                for i, completion in zip(chunk, done, strict=True):
                    out[i] = completion
        return [c for c in out if c is not None]

    def _sample(
        self, rows: list[GenerationRequest], encoded: list[list[int]], names: list[str]
    ) -> list[Completion]:
        """One batch: peft's plain path when every row uses one adapter, else its per-row one."""
        keys = [self._adapter_version(name) for name in names]
        if len(set(names)) == 1:  # one adapter for all rows: peft's plain path is faster
            with self._one_adapter(names[0]):
                return self._sample_rows(rows, encoded, None, keys)
        return self._sample_rows(rows, encoded, names, keys)

    def _adapter_version(self, name: str) -> tuple:
        """What a row's keys and values depend on besides its tokens: the adapter's LoRA
        parameters, by identity and in-place version (an optimizer step, a loaded version or
        an adapter re-added under its name changes it); the prefix cache's key."""
        if name == BASE:
            return (BASE,)
        marker = f".{name}."
        params = [p for n, p in self.model.named_parameters() if marker in n]
        return (name, *((p.data_ptr(), p._version) for p in params))

    def _sample_rows(
        self,
        rows: list[GenerationRequest],
        encoded: list[list[int]],
        names: list[str] | None,
        keys: list[tuple],
    ) -> list[Completion]:
        """Sample one batch over the KV cache (:func:`.sampler.sample_batch`) and decode it;
        ``names``: each row's adapter for peft's per-row path, None when the active adapter
        serves all; ``keys``: each row's adapter version (:meth:`_adapter_version`)."""

        head = self.model.get_output_embeddings()
        head = head if isinstance(head, Float32Head) and self.select_logits else None

        def forward(adapter_rows, **kwargs):
            row_names = None if names is None else [names[i] for i in adapter_rows]
            if head is None:
                return self._forward(adapter_names=row_names, **kwargs)
            head.hidden_only = True  # the sampler asks for the logits it needs (.cpu_speed)
            try:
                return self._forward(adapter_names=row_names, **kwargs)
            finally:
                head.hidden_only = False

        config = self.model.get_base_model().config
        tokens, logprobs, finish = sample_batch(
            forward,
            rows,
            encoded,
            [self._machine(r) for r in rows],
            pad_id=self.pad_id,
            eos_ids=self.eos_ids,
            jump_forward=self.jump_forward,
            device=self.device,
            cache_arg=self.cache_arg,
            new_cache=(
                (lambda: growing_cache(config, float32=self.float32_cache))
                if self.growing_cache
                else None
            ),
            head=None if head is None else head.logits,
            prefix_cache=self.prefix_cache if self.growing_cache else None,
            row_keys=keys,
        )
        completions = []
        for b, r in enumerate(rows):
            text_ids = [t for t in tokens[b] if t not in self.eos_ids]
            text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
            completions.append(
                Completion(text, tokens[b], logprobs[b], finish[b], len(encoded[b]), r.adapter)
            )
        return completions

    @property
    def constraints(self) -> ConstraintCompiler:
        """Regular expressions compiled to this tokenizer's token masks
        (:mod:`~leaguezero.diplomacy.llm.orders.constrained`)."""
        with self._compiler_lock:
            if self._compiler is None:
                self._compiler = ConstraintCompiler(self.tokenizer, self.eos_id)
            return self._compiler

    def _machine(self, row: GenerationRequest) -> RegexMachine | None:
        if (index := row.extra.get("regex_index")) is not None:  # llm serve's (.regex_sandbox)
            return RegexMachine(index, self.constraints.eos_id)
        regex = row.extra.get("regex")
        choices = row.extra.get("choices")
        if choices is not None:
            regex = choices.regex()
        if regex is None:
            return None
        return self.constraints.machine(regex)

    def allowed_tokens(
        self, choices: OrderChoices | None, token_ids: Sequence[int]
    ) -> list[list[int]] | None:
        """The allowed set at each position of a completion decoded under ``choices``."""
        if choices is None:
            return None
        return replay_allowed(self.constraints, choices, token_ids)

    # ------------------------------------------------------------------ training
    def logprobs(
        self,
        prompts: Sequence[str],
        completions: Sequence[Sequence[int]],
        adapter: str | None,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        temperatures: float | Sequence[float] = 1.0,
    ) -> list[torch.Tensor]:
        """Per-token log-probs ``[T_i]`` of each completion's tokens under ``adapter``, of the
        logits divided by ``temperatures`` (one for all rows, or one per row; 1: raw): the
        distribution a row sampled at that temperature was drawn from, as the sampler reports
        it (:mod:`.sampler`), so a trainer scoring at the sampling temperature is on-policy.

        ``allowed[i]`` (optional): row ``i`` was decoded under a constraint; entry ``t`` is
        the token set allowed at position ``t`` (:meth:`allowed_tokens`), and the log-prob is
        taken over that set only (0 where one token was allowed). Differentiable with respect
        to the adapter's parameters when they require gradients (:meth:`trainable_parameters`).
        One forward pass per batch of rows; rows of similar length share a batch (less
        padding: 1.5x faster on a step's records, whose prompts span 200-560 tokens), at most
        ``max_batch_size`` rows and :data:`LOGPROB_BATCH_TOKENS` padded tokens (a real model's
        prefill of 16 long rows held ~1 GB of transient activations in the KL reference pass).
        """
        if len(prompts) != len(completions):
            raise ValueError("logprobs needs one completion per prompt")
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError("logprobs needs one allowed-set entry per prompt (or none)")
        if isinstance(temperatures, (int, float)):
            temperatures = [float(temperatures)] * len(prompts)
        if len(temperatures) != len(prompts) or not all(t > 0 for t in temperatures):
            raise ValueError("logprobs needs one temperature > 0 per prompt (or one for all)")
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]) + len(completions[i]))
        results: dict[int, torch.Tensor] = {}
        lengths = [len(encoded[i]) + len(completions[i]) for i in order]
        with self._lock:
            name = self._row_name(adapter)
            # With gradients, rows of one length per pass: a padded batch needs an attention
            # mask, and the CPU's masked attention backward (the math kernel) made a pass of
            # 7 padded records 1.8x slower a token than one record at a time (unmasked flash).
            equal = torch.is_grad_enabled() and self.device.type == "cpu"
            for chunk in _token_chunks(order, lengths, self.max_batch_size, equal=equal):
                done = self._logprobs_batch(
                    [encoded[i] for i in chunk],
                    [completions[i] for i in chunk],
                    [allowed[i] if allowed is not None else None for i in chunk],
                    name,
                    [temperatures[i] for i in chunk],
                )
                results.update(zip(chunk, done, strict=True))
        return [results[i] for i in range(len(prompts))]

    def _logprobs_batch(
        self,
        prompts: Sequence[list[int]],
        completions: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[Sequence[int]] | None],
        name: str,
        temperatures: Sequence[float] | None = None,
    ) -> list[torch.Tensor]:
        """Log-probs of one batch from the answer positions only.

        Rows are *left*-padded, so every completion ends at the right edge and the model's own
        ``logits_to_keep`` returns the logits of the last ``max_answer`` positions,
        ``[B, T_max, V]``, instead of ``[B, L, V]`` (a 600-token prompt at SmolLM2's 49k
        vocabulary is 118 MB of logits per row, 365 MB at Qwen's 152k; the answers are a few
        dozen tokens). Using the model's forward keeps what it does after its head (soft-caps,
        logit scales). Positions are counted from each row's first real token, as the sampler
        counts them, so the numbers equal a right-padded full-logits pass (a test checks).
        """
        seqs = [(list(p), list(c)) for p, c in zip(prompts, completions, strict=True)]
        width = max(len(p) + len(c) for p, c in seqs)
        answer = max(len(c) for _, c in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, (p, c) in enumerate(seqs):
            input_ids[b, width - len(p) - len(c) :] = torch.tensor(p + c, dtype=torch.long)
            mask[b, width - len(p) - len(c) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        results = []
        if answer == 0:
            return [torch.zeros((0,), device=self.device) for _ in seqs]
        recompute = torch.is_grad_enabled() and self.gradient_checkpointing
        self._mode_for(recompute)
        with self._one_adapter(name, keep_active=recompute):
            out = self._forward(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions.to(self.device),
                use_cache=False,
                # The logits at position t predict token t + 1: the last answer + 1 positions
                # hold every prediction of every answer (the very last one predicts nothing).
                logits_to_keep=answer + 1,
            )
        logits = out.logits[:, :-1].float()  # [B, T_max, V]: column j predicts token j
        for b, (_, c) in enumerate(seqs):
            if not c:
                results.append(logits.new_zeros((0,)))
                continue
            steps = logits[b, answer - len(c) :]  # [T, V]
            if temperatures is not None and temperatures[b] != 1.0:
                steps = steps / temperatures[b]
            row_allowed = allowed[b]
            if row_allowed is not None:
                if len(row_allowed) != len(c):
                    raise ValueError("an allowed-set list must have one entry per token")
                keep = torch.zeros_like(steps, dtype=torch.bool)
                for t, ids in enumerate(row_allowed):
                    keep[t, list(ids)] = True
                steps = steps.masked_fill(~keep, float("-inf"))
            target = torch.tensor(c, dtype=torch.long, device=self.device)[:, None]
            results.append(torch.log_softmax(steps, dim=-1).gather(1, target)[:, 0])
        return results
