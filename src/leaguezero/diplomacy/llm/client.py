"""The one generation interface every LLM backend implements.

``generate(prompts, adapters, max_new_tokens, temperature, seed)`` returns one
:class:`Completion` per prompt: its text, the sampled token ids and each sampled token's
log-probability (GRPO's old log-probs). ``adapters[i]`` names the LoRA adapter of row ``i``;
``None`` is the base model. A call may mix adapters; backends batch what they can.

Conventions all backends keep (so the in-process backend, our server and vLLM agree):

- **Log-probs are of the sampling distribution**: ``log_softmax`` of the model's logits
  divided by the row's temperature (raw logits for a greedy row), so a trainer scoring at the
  sampling temperature recomputes the same quantity with one forward pass. At temperature 1,
  the shipped configs' value, this is vLLM's default ``raw_logprobs`` mode too; at any other
  temperature vLLM reports raw (temperature-1) log-probs unless started with ``--logprobs-mode
  processed_logprobs``, which is why training through a server refuses a temperature other
  than 1 while the sampler weight is on (``train.is_correction``, config.py).
- **Token ids** are the completion's tokens, end-of-sequence included when it was sampled
  (its probability is part of the completion's); the text leaves special tokens out.
- **The distribution is the model's, untruncated and unpenalised**: every request pins the
  sampling parameters a server would otherwise fill in (:data:`NEUTRAL_SAMPLING`), so the
  policy that samples is the policy the trainer scores.
- **Seeds**: row ``i`` samples with seed ``seed + i``, so a row's sample does not depend on
  what else shares its batch (identical prompts in one call still differ). ``temperature``
  0 is greedy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# What every completion request pins (`top_k` 0 = disabled, as vLLM >= 0.8 reads it). vLLM fills
# any sampling parameter a request leaves out from the model's generation_config.json under its
# default `--generation-config auto` (vLLM 0.11.0 config/model.py `get_diff_sampling_param`,
# read by entrypoints/openai/protocol.py `CompletionRequest.to_sampling_params`): a Qwen or
# Llama instruct base would then sample a top-p/top-k truncated, repetition-penalised
# distribution that the trainer never scores, and greedy evaluations would move with the
# penalties. TRL, verl and OpenRLHF neutralise the same fields.
NEUTRAL_SAMPLING: dict[str, float | int] = {
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


class LLMError(RuntimeError):
    """A generation or adapter request that failed; the message is one line for the user."""


class AdapterCapacityError(LLMError):
    """The server refused to load another adapter (its resident limit, or memory)."""


class UnknownAdapterError(LLMError, KeyError):
    """A request named an adapter the backend has not loaded."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# More constrained answers outside their expression than this share is alarmed (step events,
# the eval report, stderr): one now and then is a failed seat, many are a misconfigured server.
GRAMMAR_ALARM_SHARE = 0.01


def grammar_alarm(violations: int, answers: int) -> str | None:
    """The warning for ``violations`` answers outside their expression among ``answers``, when
    above :data:`GRAMMAR_ALARM_SHARE`; None otherwise. Names the cause: the server's
    structured-outputs engine samples under a mask other than the trainer's replay (xgrammar
    before 0.2.1 admits lines that mix two options,
    ``tests/diplomacy/llm/orders/test_grammar_agreement.py``) or ignores the field."""
    if violations <= GRAMMAR_ALARM_SHARE * max(answers, 1):
        return None
    return (
        f"{violations} of {answers} constrained answers broke their order expression (their "
        "seats held, their records were dropped): the server's structured-outputs engine masks "
        "otherwise than the trainer's replay -- xgrammar before 0.2.1 (vLLM 0.11 to at least "
        "0.14 bundle 0.1.x) admits lines mixing two options, and vLLM < 0.11 ignores "
        "structured_outputs altogether; serve with --structured-outputs-config "
        '\'{"backend": "outlines"}\' or a vLLM whose xgrammar is >= 0.2.1 (docs/guides/llm.md)'
    )


@dataclass
class Completion:
    """One sampled completion.

    ``token_ids``: ``[T]`` the sampled tokens; ``logprobs``: ``[T]`` raw log-probability of
    each (see module doc); ``finish_reason``: ``"stop"`` (end of sequence) or ``"length"``;
    ``grammar_violation``: a constrained answer that breaks its constraint (a server whose
    grammar engine's mask differs from the trainer's): a failed seat, never a training record.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "length"
    prompt_tokens: int = 0
    adapter: str | None = None
    grammar_violation: bool = False

    @property
    def logprob_sum(self) -> float:
        """The completion's log-probability (sum over its tokens)."""
        return float(sum(self.logprobs))


@dataclass
class GenerationRequest:
    """One row of a generation call (used by batching servers and clients)."""

    prompt: str
    adapter: str | None
    max_new_tokens: int
    temperature: float
    seed: int
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class GenerationClient(Protocol):
    """What an LLM seat needs from a backend: sampling and adapter management by name."""

    def generate(
        self,
        prompts: Sequence[str],
        adapters: Sequence[str | None],
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: Sequence[object | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt; ``adapters[i]`` None is the base model; ``choices[i]``
        (optional) decodes row ``i`` under a
        :class:`~leaguezero.diplomacy.llm.orders.constrained.OrderChoices`."""
        ...

    def load_adapter(self, name: str, path: str) -> None:
        """Make the adapter saved in folder ``path`` available as ``name``."""
        ...

    def unload_adapter(self, name: str) -> None:
        """Forget adapter ``name`` (frees its slot)."""
        ...

    def list_adapters(self) -> list[str]:
        """Names of the adapters loaded now."""
        ...


def check_rows(prompts: Sequence[str], adapters: Sequence[str | None]) -> None:
    """Raise ``ValueError`` unless there is exactly one adapter entry per prompt."""
    if len(prompts) != len(adapters):
        raise ValueError(
            f"generate needs one adapter entry per prompt (None for the base model); got "
            f"{len(prompts)} prompts and {len(adapters)} adapters"
        )


def make_requests(
    prompts: Sequence[str],
    adapters: Sequence[str | None],
    max_new_tokens: int,
    temperature: float,
    seed: int,
    choices: Sequence[object | None] | None = None,
) -> list[GenerationRequest]:
    """The rows of a ``generate`` call (checked); row ``i`` samples with ``seed + i``;
    ``choices[i]``: row ``i``'s constraint
    (:class:`~leaguezero.diplomacy.llm.orders.constrained.OrderChoices`), if any."""
    check_rows(prompts, adapters)
    if choices is not None and len(choices) != len(prompts):
        raise ValueError(f"generate got {len(choices)} constraints for {len(prompts)} prompts")
    rows = []
    for i, (p, a) in enumerate(zip(prompts, adapters, strict=True)):
        row = GenerationRequest(p, a, max_new_tokens, temperature, seed + i)
        if choices is not None and choices[i] is not None:
            row.extra["choices"] = choices[i]
        rows.append(row)
    return rows
