"""One LLM runtime per process: where the LLM section's model runs, chosen in one place.

Every process that plays or trains LLM seats takes its model from here: the trainer
(:class:`~leaguezero.diplomacy.train.llm_hero.LanguageModelHero`), the league evaluator and
the LLM folders of ``diplomacy eval/bench/play`` and the web app
(:mod:`~leaguezero.diplomacy.llm.resolvers`), Ray game workers
(:func:`~leaguezero.diplomacy.train.llm_games.play_remote_game`), and the ``llm`` commands
(``serve``, ``imitate``, ``pretrain``: :func:`load_backend`, :func:`make_batcher`).

:class:`LLMRuntime` reads ``llm.backend`` once (``llm.sampling``) and builds what the caller
samples on:

- ``hf``: the base model in this process (:func:`load_backend`, an
  :class:`~.model.hf_backend.HFBackend`); a trainer samples through a
  :class:`~.model.batching.BatchingGenerator` (:class:`InProcessSampler`: the games of a group
  meet in one batch per forward pass, as many rows as its memory plan allows) with the
  training adapter pinned in its :class:`~.remote.adapters.AdapterSlots`; others sample on the
  backend itself, games played at once sharing batches (:class:`LockstepSampler`);
- ``openai``: an :class:`~.remote.openai_client.OpenAIClient` for ``llm.endpoint`` (vLLM or
  ``leaguezero llm serve``), checked to answer, adapters within ``llm.max_loras`` and loaded
  again after a server restart. Only a trainer loads the base model's weights too (it computes
  the gradients); a process that only samples loads the tokenizer alone
  (:func:`load_tokenizer`: prompts are rendered in the base model's chat template here).

Prompts are wrapped as :func:`chat_format` says, in every process alike.

Why ``backends.py`` is gone: its helpers (the backend from the config, the checked server
client, the in-process sampler) are what this runtime is made of, and a second module building
backends would be a second place to change. What each backend *is* stays in its own file
(``model/hf_backend.py``, ``remote/openai_client.py``); a new backend adds its file and a
branch here. ``tests/diplomacy/llm/test_llm_runtime.py`` checks that nothing else under ``src/``
constructs a backend, a client or a batcher.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from leaguezero.common import lockstep
from leaguezero.common.memory import bound_malloc_arenas, freeze_long_lived
from leaguezero.diplomacy.config import LLMSection
from leaguezero.diplomacy.llm.client import GenerationClient, LLMError, make_requests
from leaguezero.diplomacy.llm.model.batching import BatchingGenerator
from leaguezero.diplomacy.llm.model.gguf import converted_folder, is_gguf
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings
from leaguezero.diplomacy.llm.orders.prompt import ChatFormat
from leaguezero.diplomacy.llm.remote.adapters import AdapterSlots
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient


def chat_format(llm: LLMSection) -> ChatFormat:
    """How the section's prompts are wrapped in the base model's chat template
    (``llm.system_prompt``, ``llm.chat_template_kwargs``): every renderer of prompts (the hero,
    the evaluator, folders, remote workers) takes it from here, so all render alike."""
    return ChatFormat(llm.system_prompt, dict(llm.chat_template_kwargs))


# ----- the parts ------------------------------------------------------------------------------
def load_backend(path: str | Path, **options: Any) -> HFBackend:
    """The base model at ``path`` (a folder or a ``.gguf`` file) in this process, with its
    tokenizer: the one place a model's weights are loaded for sampling or training.

    ``options``: :meth:`~.model.hf_backend.HFBackend.from_pretrained`'s keywords (``lora``,
    ``model_name``, ``device``, ``dtype``, ``bf16_autocast``), passed through so their defaults
    stay written once, there. Raises what it raises.
    """
    return HFBackend.from_pretrained(path, **options)


def backend_from_config(llm: LLMSection) -> HFBackend:
    """The ``hf`` backend of ``llm.base_model`` with the section's LoRA shape, device, dtype.

    Raises :class:`~.client.LLMError` with one line when there is no base model folder or it
    cannot be loaded.
    """
    if llm.base_model is None:
        raise LLMError(
            "train.agent=llm needs llm.base_model: a local folder with a causal LM and its "
            "tokenizer (save_pretrained, or `leaguezero llm pretrain --out DIR`); nothing is "
            "downloaded"
        )
    lora = LoraSettings(
        rank=llm.lora_rank,
        alpha=llm.lora_alpha,
        target_modules=llm.target_modules,
        max_lora_rank=llm.max_lora_rank,
    )
    try:
        return load_backend(llm.base_model, lora=lora, device=llm.device, dtype=llm.dtype)
    except (OSError, ValueError) as err:
        raise LLMError(f"cannot load base model {llm.base_model}: {err}") from None


def open_client(endpoint: str, served_model_name: str | None = None) -> OpenAIClient:
    """An unchecked client of the server at ``endpoint`` (a Ray worker's, per game: the trainer
    checked the server; a restart is waited for)."""
    return OpenAIClient(endpoint, base_model=served_model_name)


def server_client(llm: LLMSection) -> OpenAIClient:
    """An :class:`~leaguezero.diplomacy.llm.remote.openai_client.OpenAIClient` for ``llm.endpoint``
    (vLLM or ``llm serve``), checked to answer now (:class:`~.client.LLMError` saying how to start
    one if not)."""
    client = open_client(llm.endpoint, llm.served_model_name)
    patience, client.reconnect_s = client.reconnect_s, 0.0  # a server not up yet: say so now
    try:
        client.models()
        client.reconnect_s = patience  # once running, a restart is waited for
    except LLMError as err:
        client.close()
        raise LLMError(
            f"{err}; start the server first (`leaguezero llm serve --base-model "
            f"{llm.base_model} --max-loras {llm.max_loras}` or vLLM, docs/guides/llm.md)"
        ) from None
    return client


def make_batcher(backend: HFBackend, **options: Any) -> BatchingGenerator:
    """A :class:`~.model.batching.BatchingGenerator` in front of ``backend`` (``options``:
    ``max_batch``, ``wait_s``, ``max_adapters``); ``llm serve`` and the trainer batch here."""
    return BatchingGenerator(backend, **options)


@functools.cache
def load_tokenizer(path: str) -> Any:
    """The tokenizer of the base model at ``path`` without its weights (once per process).

    A ``.gguf`` file not converted yet gives its tokenizer straight from the file, so a
    client that only samples on a server never dequantises the weights.
    """
    from transformers import AutoTokenizer

    folder = source = Path(path)
    if is_gguf(source) and (folder := converted_folder(source)) is None:
        try:  # the header was checked (converted_folder); the converter's errors: one line
            return AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        except Exception as err:
            raise LLMError(f"cannot read the tokenizer of GGUF file {path}: {err}") from None
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise LLMError(f"cannot load the tokenizer of {path}: {err}") from None


def folder_adapter_name(folder: str | Path) -> str:
    """The name an adapter folder is loaded under by command-line agents: unique per folder
    and per version of its files (a folder written again gets a new name, so neither a
    runtime that lives on, e.g. the web app's, nor vLLM's cache by name serves stale weights)."""
    path = Path(folder).resolve()
    stamps = sorted(
        (p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in path.iterdir() if p.is_file()
    )
    digest = hashlib.sha1(repr((str(path), stamps)).encode()).hexdigest()
    return f"folder-{digest[:12]}"


class _BackendAdapters:
    """A sampler whose adapters live on the in-process backend (``self.backend``)."""

    backend: HFBackend

    def load_adapter(self, name: str, path: str) -> None:
        self.backend.load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        self.backend.unload_adapter(name)

    def list_adapters(self) -> list[str]:
        return self.backend.list_adapters()


class InProcessSampler(_BackendAdapters):
    """The in-process sampler: generation through the batcher, adapters on the backend."""

    def __init__(self, batcher: BatchingGenerator, backend: HFBackend) -> None:
        self.batcher = batcher
        self.backend = backend

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed, choices=None):
        return self.batcher.generate(prompts, adapters, max_new_tokens, temperature, seed, choices)


class LockstepSampler(_BackendAdapters):
    """The in-process backend for callers that play games at once: a call from a game of a
    :class:`~leaguezero.common.lockstep.Lockstep` group (``run_tournament``'s
    ``concurrent_games``) waits for the group's other games and shares one batch with them,
    reproducibly; any other call goes to the backend as it is."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed, choices=None):
        rows = make_requests(prompts, adapters, max_new_tokens, temperature, seed, choices)
        member = lockstep.current()
        if member is None:
            return self.backend.generate_rows(rows)
        group, number = member
        return group.call(number, rows, self.backend.generate_rows)


# ----- the runtime ----------------------------------------------------------------------------
class LLMRuntime:
    """The model LLM seats sample on in this process, and the weights a trainer holds.

    ``llm``: the config's section (its ``base_model``, ``backend``, LoRA shape, device, dtype,
    ``endpoint``, ``max_loras``); ``trainer``: this process computes gradients, so it holds the
    weights even when a server samples, and samples in process through a batcher;
    ``batched``: sample in process through a batcher and adapter slots without training (a
    play helper's games, one thread each, sharing forward passes; implied by ``trainer``);
    ``gradient_checkpointing``: a trainer's backward passes recompute activations;
    ``sampling_rows``: a trainer's rows per in-process sampling batch, from the loaded backend
    (its memory plan; None: the batcher's default); ``pinned``: adapters the in-process slots
    never unload (the training adapter). Raises :class:`~.client.LLMError` (one line).

    Attributes: ``backend`` (the weights here, or None), ``client`` (the server, or None),
    ``sampler`` (what tables sample on), ``tokenizer``, ``slots`` (adapters within
    ``llm.max_loras``, or None: load on ``sampler`` directly), ``batcher`` (or None), ``chat``.
    """

    def __init__(
        self,
        llm: LLMSection,
        *,
        trainer: bool = False,
        batched: bool = False,
        gradient_checkpointing: bool = False,
        sampling_rows: Callable[[HFBackend], int] | None = None,
        pinned: Collection[str] = (),
    ) -> None:
        self.llm = llm
        self.remote = llm.sampling.shared_server
        self.chat = chat_format(llm)
        self.backend: HFBackend | None = None
        self.client: OpenAIClient | None = None
        self.batcher: BatchingGenerator | None = None
        self.slots: AdapterSlots | None = None
        self._load_lock = threading.Lock()
        if trainer or not self.remote:  # the weights: sampled here, or needed for gradients
            bound_malloc_arenas()  # game threads sample in turn: few arenas (common.memory)
            self.backend = backend_from_config(llm)
            freeze_long_lived()  # the model outlives every forward pass (common.memory)
        if self.remote:
            try:
                self.client = server_client(llm)
            except LLMError:
                self.close()
                raise
        if gradient_checkpointing and self.backend is not None:
            self.backend.enable_gradient_checkpointing()
        if self.backend is not None:
            self.tokenizer = self.backend.tokenizer
        elif llm.base_model is None:
            raise LLMError(
                "llm.backend=openai renders prompts in the base model's chat template here: set "
                "llm.base_model to the served model's folder or .gguf file (its tokenizer only "
                "is loaded)"
            )
        else:
            self.tokenizer = load_tokenizer(str(llm.base_model))
        self.sampler: GenerationClient
        if self.client is not None:
            self.sampler = self.client
            self.slots = AdapterSlots(self.client, llm.max_loras, owned_only=True)
            # A restarted server has forgotten every adapter: a completion that names one
            # loads it again (from the folder it was ensured with) and goes on.
            self.client.reloader = self.slots.reload
        elif trainer or batched:
            assert self.backend is not None
            # Games of a group run in threads; their rows meet in one batch per forward pass
            # (as many as the memory plan leaves room for).
            rows = {} if sampling_rows is None else {"max_batch": sampling_rows(self.backend)}
            self.batcher = make_batcher(self.backend, wait_s=0.05, **rows)
            self.sampler = InProcessSampler(self.batcher, self.backend)
            self.slots = AdapterSlots(
                self.backend, llm.max_loras, pinned=set(pinned), owned_only=True
            )
        else:
            assert self.backend is not None
            self.sampler = LockstepSampler(self.backend)

    def client_for(self, decoding) -> GenerationClient:
        """What an LLM table of ``decoding`` samples through: the sampler, or the backend
        itself for a decoding that scores in process (ranking), checked (``ValueError``, one
        line, when neither can)."""
        try:
            decoding.check_client(self.sampler)
            return self.sampler
        except ValueError:
            if self.backend is None:
                raise
            decoding.check_client(self.backend)
            return self.backend

    @property
    def render(self) -> Callable[[str], str]:
        """Prompt -> the text sent to the model (``llm``'s chat format, this tokenizer)."""
        return self.chat.renderer(self.tokenizer)

    def ensure_adapters(self, folders: Mapping[str, str | Path]) -> None:
        """Load each ``name: folder`` not loaded yet: through the slots (within
        ``llm.max_loras``) when there are any, else on the backend, once per process."""
        needed = {name: str(folder) for name, folder in folders.items()}
        if self.slots is not None:
            self.slots.ensure(needed)
            return
        with self._load_lock:  # two web games naming one folder load it once
            loaded = set(self.sampler.list_adapters())
            for name, folder in needed.items():
                if name not in loaded:
                    self.sampler.load_adapter(name, folder)

    def close(self) -> None:
        """Stop the batcher and close the server connection (the weights stay until freed)."""
        if self.client is not None:
            self.client.close()
        if self.batcher is not None:
            self.batcher.close()


_SHARED: dict[tuple, LLMRuntime] = {}
_SHARED_LOCK = threading.Lock()


def shared_runtime(llm: LLMSection) -> LLMRuntime:
    """This process's sampling runtime for ``llm`` (no trainer), built on first use and kept:
    the command-line agents of every game a process plays (the web app's games, one command's
    evaluations) share one base model or one server client. Keyed by what builds the runtime,
    not by the prompt settings (system prompt, mode, budget), which each table takes from its
    own section."""
    key = (
        llm.backend,
        llm.base_model,
        llm.device,
        llm.dtype,
        llm.lora_rank,
        llm.lora_alpha,
        llm.max_lora_rank,
        str(llm.target_modules),
        llm.endpoint,
        llm.served_model_name,
        llm.max_loras,
    )
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = LLMRuntime(llm)
        return _SHARED[key]


def worker_sampler(
    endpoint: str, served_model_name: str | None, tokenizer_path: str
) -> tuple[OpenAIClient, Any]:
    """A Ray game worker's runtime: a client of the shared server (closed by the caller) and
    the base model's tokenizer (loaded once per worker process, without the weights)."""
    return open_client(endpoint, served_model_name), load_tokenizer(tokenizer_path)
