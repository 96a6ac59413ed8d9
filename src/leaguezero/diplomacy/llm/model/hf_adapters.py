"""The named adapter slots of :class:`~.hf_backend.HFBackend`: add, load, unload, save.

An adapter is a peft LoRA adapter under a name; ``__base__`` (:data:`BASE`) names the bare
model in a row, and a placeholder adapter (:data:`PLACEHOLDER`) keeps the model a PeftModel
when no real adapter is loaded. Exactly one adapter (or none) requires gradients: the one
:meth:`AdapterSlots.trainable_parameters` designates (:meth:`AdapterSlots._freeze`).

Adapters are saved as peft folders (``adapter_config.json`` + ``adapter_model.safetensors``,
what ``vllm serve --enable-lora`` loads) plus ``leaguezero_adapter.json`` (schema version,
name, rank, prompt version), written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import torch

from leaguezero.common.atomic import atomic_folder, atomic_write_json
from leaguezero.diplomacy.llm.client import LLMError, UnknownAdapterError
from leaguezero.diplomacy.llm.model.adapter_files import (
    adapter_folder_mode,
    folder_checksums,
    read_adapter_folder,
    share_with_group,
)
from leaguezero.diplomacy.llm.model.cpu_speed import float32_adapters
from leaguezero.diplomacy.llm.model.hf_lora import LoraSettings, lora_config
from leaguezero.diplomacy.llm.orders.prompt import PROMPT_VERSION

ADAPTER_SCHEMA_VERSION = 1
ADAPTER_META = "leaguezero_adapter.json"
BASE = "__base__"  # peft's row name for "no adapter"
PLACEHOLDER = "lz_placeholder"  # keeps the model a PeftModel when no real adapter is loaded


class AdapterSlots:
    """:class:`~.hf_backend.HFBackend`'s adapter methods (a mixin): they share its lock, its
    peft model and which adapter is trainable, all set by its constructor."""

    model: torch.nn.Module  # the peft-wrapped causal LM
    lora: LoraSettings
    model_name: str
    device: torch.device
    _lock: threading.RLock
    _trainable: str | None  # the one adapter that may require gradients
    _pending: set[str]  # adapters being loaded (see load_adapter)

    def list_adapters(self) -> list[str]:
        """Names of the loaded adapters (the placeholder is not one)."""
        # An adapter being loaded is not listed until all its weights are in.
        pending = self._pending
        return [n for n in self.model.peft_config if n != PLACEHOLDER and n not in pending]

    def _check_name(self, name: str) -> None:
        if not name or name in (BASE, PLACEHOLDER, self.model_name) or "." in name:
            raise ValueError(f"{name!r} cannot name an adapter (empty, reserved or has a '.')")

    def add_adapter(self, name: str, *, seed: int | None = None) -> None:
        """A new adapter ``name`` with peft's initialisation (B = 0: it starts as the base).
        ``seed``: draw A from its own generator (the same weights whatever this process drew
        before; torch's global generator is left as it was), else from the global one."""
        self._check_name(name)
        with self._lock:
            if name in self.model.peft_config:
                raise ValueError(f"adapter {name!r} is already loaded")
            with torch.random.fork_rng(devices=[], enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(seed)
                self.model.add_adapter(name, lora_config(self.lora))
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

    def _freeze(self) -> None:
        # peft marks adapters trainable as it adds them; only the designated one may be.
        marker = f".{self._trainable}." if self._trainable else None
        for pname, param in self.model.named_parameters():
            param.requires_grad_(marker is not None and marker in pname)

    def _row_name(self, adapter: str | None) -> str:
        if adapter is None or adapter == self.model_name:
            return BASE
        if adapter not in self.model.peft_config or adapter == PLACEHOLDER:
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
                        self.model.base_model.set_adapter(PLACEHOLDER, inference_mode=True)
        finally:
            # Both flip requires_grad (peft re-activates adapters as trainable); only the
            # designated adapter may be, and before any backward pass (autograd skips a
            # parameter that stopped requiring grad after the forward).
            self._freeze()

    def _adapter_version(self, name: str) -> tuple:
        """What a row's keys and values depend on besides its tokens: the adapter's LoRA
        parameters, by identity and in-place version (an optimizer step, a loaded version or
        an adapter re-added under its name changes it); the prefix cache's key."""
        if name == BASE:
            return (BASE,)
        marker = f".{name}."
        params = [p for n, p in self.model.named_parameters() if marker in n]
        return (name, *((p.data_ptr(), p._version) for p in params))
