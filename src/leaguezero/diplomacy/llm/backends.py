"""Where the LLM section's model runs: the in-process base model and the server client.

- :func:`backend_from_config` loads ``llm.base_model`` into an :class:`~.hf_backend.HFBackend`
  (transformers + peft in this process; nothing is downloaded); a trainer always holds one for
  the gradients;
- :func:`server_client`: an :class:`~.openai_client.OpenAIClient` for ``llm.endpoint`` (vLLM or
  ``leaguezero llm serve``), checked to answer;
- :func:`chat_format`: how prompts are wrapped in the base model's chat template;
- :class:`InProcessSampler`: generation through a batcher in front of the in-process backend
  (the games of a group meet in one batch per forward pass).

Which of the two samples is the config's ``llm.backend``, read once into
:attr:`~leaguezero.diplomacy.config.LLMSection.sampling` (a
:class:`~leaguezero.diplomacy.config.SamplingBackend`).
"""

from __future__ import annotations

from leaguezero.diplomacy.config import LLMSection
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.model.batching import BatchingGenerator
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings
from leaguezero.diplomacy.llm.orders.prompt import ChatFormat
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient


def chat_format(llm: LLMSection) -> ChatFormat:
    """How the section's prompts are wrapped in the base model's chat template
    (``llm.system_prompt``, ``llm.chat_template_kwargs``): every renderer of prompts (the hero,
    the evaluator, folders, remote workers) takes it from here, so all render alike."""
    return ChatFormat(llm.system_prompt, dict(llm.chat_template_kwargs))


def backend_from_config(llm: LLMSection) -> HFBackend:
    """The ``hf`` backend of ``llm.base_model`` with the section's LoRA shape, device, dtype.

    The trainer always holds the base model in process (it computes the gradients); with
    ``llm.backend: openai`` only the sampling goes to the server. Raises
    :class:`~.client.LLMError` with one line when there is no base model folder.
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
        return HFBackend.from_pretrained(
            llm.base_model,
            lora=lora,
            device=llm.device,
            dtype=llm.dtype,
        )
    except (OSError, ValueError) as err:
        raise LLMError(f"cannot load base model {llm.base_model}: {err}") from None


def server_client(llm: LLMSection) -> OpenAIClient:
    """An :class:`~.openai_client.OpenAIClient` for ``llm.endpoint`` (vLLM or ``llm serve``)."""
    client = OpenAIClient(llm.endpoint, base_model=llm.served_model_name)
    patience, client.reconnect_s = client.reconnect_s, 0.0  # a server not up yet: say so now
    try:
        client.models()
        client.reconnect_s = patience  # once running, a restart is waited for
    except LLMError as err:
        client.close()
        raise LLMError(
            f"{err}; start the server first (`leaguezero llm serve --base-model "
            f"{llm.base_model} --max-loras {llm.max_loras}` or vLLM, docs/llm.md)"
        ) from None
    return client


class InProcessSampler:
    """The in-process sampler: generation through the batcher, adapters on the backend."""

    def __init__(self, batcher: BatchingGenerator, backend: HFBackend) -> None:
        self.batcher = batcher
        self.backend = backend

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed, choices=None):
        return self.batcher.generate(prompts, adapters, max_new_tokens, temperature, seed, choices)

    def load_adapter(self, name: str, path: str) -> None:
        self.backend.load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        self.backend.unload_adapter(name)

    def list_adapters(self) -> list[str]:
        return self.backend.list_adapters()
