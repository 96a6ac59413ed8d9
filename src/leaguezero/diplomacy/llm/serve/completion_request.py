"""The ``/v1/completions`` request and response of :class:`~.server.LLMServer`, as OpenAI's and
vLLM's completions API shapes them: a request's fields checked into generation rows (a bad
field: :class:`~.server_http.RequestError`, a 4xx with one line), and the completions turned
into the ``text_completion`` object. The server adds what needs its state: tokenising, the
``structured_outputs`` constraint, the batcher."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from leaguezero.diplomacy.llm.client import NEUTRAL_SAMPLING, GenerationRequest
from leaguezero.diplomacy.llm.serve.server_http import RequestError

MIN_TEMPERATURE = 1e-5  # below it (but above 0) the logits' division overflows; vLLM's epsilon
MAX_PROMPTS_PER_REQUEST = 256  # one request's rows all enter the batcher's queue at once


def shown_name(name: str) -> str:
    """A name from a request as an error message may echo it (cut short)."""
    return name if len(name) <= 80 else name[:80] + "..."


def request_field(
    body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    """``body[name]`` of type ``kind`` (absent or null: ``default``; a bool is no number)."""
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise RequestError(f"'{name}' must be a number")
    if not isinstance(value, kind):
        raise RequestError(f"'{name}' has the wrong type ({type(value).__name__})")
    return value


# vLLM's neutral value of each distribution field it may take besides NEUTRAL_SAMPLING's (the
# values that leave sampling as this server does it); top_k -1 is vLLM's older spelling of 0.
_ALSO_NEUTRAL = {"top_k": (-1,)}
# Request fields that change what vLLM generates, which this server does not implement: given
# with a value other than vLLM's default (absent, null, empty, false, 0; 1 for the two whose
# default is 1), they are refused.
_UNSUPPORTED = (
    "stop", "stop_token_ids", "logit_bias", "bad_words", "min_tokens", "ignore_eos", "echo",
    "suffix", "allowed_token_ids", "use_beam_search", "structural_tag", "guided_regex",
    "guided_choice", "guided_json", "guided_grammar", "best_of", "length_penalty",
)  # fmt: skip
_DEFAULT_ONE = ("best_of", "length_penalty")


def check_neutral_sampling(body: dict[str, Any]) -> None:
    """Refuse a request whose sampling fields ask for a distribution this server does not
    sample (see :mod:`.server`): each of :data:`~leaguezero.diplomacy.llm.client.NEUTRAL_SAMPLING`'s
    fields absent or at its neutral value, and no unsupported field with a non-default value."""
    for name, neutral in NEUTRAL_SAMPLING.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RequestError(f"'{name}' must be a number")
        if value != neutral and value not in _ALSO_NEUTRAL.get(name, ()):
            raise RequestError(
                f"'{name}' {value!r} is not supported by this server: it samples the model's "
                f"full distribution ({name} {neutral})"
            )
    for name in _UNSUPPORTED:
        value = body.get(name)
        if value is None or (value == 1 if name in _DEFAULT_ONE else value in (0, "", [], {})):
            continue
        raise RequestError(f"'{name}' is not supported by this server")


@dataclass(frozen=True)
class CompletionRequest:
    """A checked request: the model it named, one row a prompt, and what the answer carries."""

    model: str
    rows: list[GenerationRequest]
    want_logprobs: bool
    want_ids: bool


def completion_request(
    body: dict[str, Any], base_name: str, adapters: list[str]
) -> CompletionRequest:
    """Check a request's fields against the base model's name and the loaded ``adapters``."""
    model = request_field(body, "model", str, None)
    if model is None:
        raise RequestError("'model' is required: an adapter name or the base model's name")
    adapter = None if model == base_name else model
    if adapter is not None and adapter not in adapters:
        raise RequestError(
            f"The model `{shown_name(model)}` does not exist.", status=HTTPStatus.NOT_FOUND
        )
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise RequestError("'prompt' must be a string or a non-empty list of strings")
    if len(prompts) > MAX_PROMPTS_PER_REQUEST:
        raise RequestError(f"at most {MAX_PROMPTS_PER_REQUEST} prompts per request")
    if body.get("stream"):
        raise RequestError("streaming is not supported by this server")
    if request_field(body, "n", int, 1) != 1:
        raise RequestError("only n = 1 is supported")
    check_neutral_sampling(body)
    max_tokens = request_field(body, "max_tokens", int, 16)
    temperature = request_field(body, "temperature", (int, float), 1.0)
    if not isinstance(temperature, float):
        temperature = float(temperature) if abs(temperature) < 1 << 53 else math.inf
    if not math.isfinite(temperature) or 0 < temperature < MIN_TEMPERATURE:
        raise RequestError(f"'temperature' must be 0 (greedy) or in [{MIN_TEMPERATURE}, inf)")
    seed = request_field(body, "seed", int, None)
    if seed is None:
        seed = uuid.uuid4().int & 0x7FFF_FFFF
    want_logprobs = request_field(body, "logprobs", int, None) is not None
    want_ids = bool(body.get("return_token_ids"))
    if max_tokens < 1 or temperature < 0:
        raise RequestError("'max_tokens' must be >= 1 and 'temperature' >= 0")
    if not 0 <= seed < 1 << 63:
        raise RequestError("'seed' must be in [0, 2**63)")
    rows = [GenerationRequest(p, adapter, max_tokens, temperature, seed) for p in prompts]
    return CompletionRequest(model, rows, want_logprobs, want_ids)


def completion_response(
    request: CompletionRequest, completions: list, tokenizer: Any
) -> dict[str, Any]:
    """The OpenAI ``text_completion`` object of a request's completions (in prompt order)."""
    choices = []
    for index, c in enumerate(completions):
        choice: dict[str, Any] = {
            "index": index,
            "text": c.text,
            "finish_reason": c.finish_reason,
            "logprobs": None,
        }
        if request.want_logprobs:
            choice["logprobs"] = {
                "tokens": [tokenizer.decode([t]) for t in c.token_ids],
                "token_logprobs": c.logprobs,
                "top_logprobs": None,
                "text_offset": None,
            }
        if request.want_ids:
            choice["token_ids"] = c.token_ids
        choices.append(choice)
    prompt_tokens = sum(c.prompt_tokens for c in completions)
    completion_tokens = sum(len(c.token_ids) for c in completions)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
