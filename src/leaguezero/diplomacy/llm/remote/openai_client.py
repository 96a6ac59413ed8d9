"""A client of the OpenAI-compatible HTTP subset that vLLM serves (and ``llm serve`` too).

- ``generate`` sends one ``POST /v1/completions`` per prompt, concurrently, with ``model`` =
  the row's adapter name (the base model's name for None), ``seed`` = ``seed + i`` (vLLM
  applies one seed to every prompt of a request, so identical prompts would get identical
  samples if batched in one request), ``logprobs: 1`` and ``return_token_ids: true``, and the
  sampling distribution pinned (:data:`~leaguezero.diplomacy.llm.client.NEUTRAL_SAMPLING`: top_p 1,
  top_k 0, min_p 0, neutral penalties; vLLM would otherwise take them from the model's
  ``generation_config.json``). The server batches the concurrent requests (vLLM's scheduler;
  our server's batcher).
- ``load_adapter`` / ``unload_adapter`` call vLLM's runtime endpoints
  ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and
  ``POST /v1/unload_lora_adapter`` ``{"lora_name"}``; vLLM enables them only with
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. ``lora_path`` is read by the *server*, so it must
  be a path on the server's filesystem.
- ``list_adapters`` / ``base_model`` come from ``GET /v1/models`` (adapters have a ``parent``).

The key (``api_key``, or ``LEAGUEZERO_LLM_API_KEY``) is never sent as is to ``llm serve``:
each request proves it with an HMAC and each answer must prove it back, else it is refused in
one line (:mod:`~..serve.key_proof`); after a reconnect the server is proven before a request is
sent again. A third-party server that knows only plain ``Bearer`` keys (vLLM) needs
``key_mode="bearer"`` (``LEAGUEZERO_LLM_KEY_MODE=bearer``): the key then goes as is and answers
cannot be checked.

Token ids: vLLM returns ``choices[i].token_ids`` when asked with ``return_token_ids``; older
servers that ignore it are read through ``return_tokens_as_token_ids`` (tokens spelled
``token_id:123``), which is also requested.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from leaguezero.diplomacy.llm.client import (
    NEUTRAL_SAMPLING,
    AdapterCapacityError,
    Completion,
    LLMError,
    UnknownAdapterError,
    grammar_alarm,
    make_requests,
)
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.serve import key_proof
from leaguezero.diplomacy.llm.serve.server_http import API_KEY_ENV

KEY_MODE_ENV = "LEAGUEZERO_LLM_KEY_MODE"
KEY_MODES = ("proof", "bearer")  # HMAC both ways (llm serve); the plain key (vLLM)

_WARN_LOCK = threading.Lock()


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(body)[:300]


class OpenAIClient:
    """A :class:`~leaguezero.diplomacy.llm.client.GenerationClient` over HTTP (see module doc).

    ``endpoint``: the server's base URL (``http://127.0.0.1:8000``; a trailing ``/v1`` is
    accepted); ``base_model``: the name the server gives the base model (asked from
    ``/v1/models`` when None); ``api_key``: the key of ``llm serve --api-key`` or vLLM's
    ``--api-key`` (None: the environment variable ``LEAGUEZERO_LLM_API_KEY``, if set);
    ``key_mode``: ``"proof"`` (the default; ``llm serve``: the key is proven both ways, never
    sent) or ``"bearer"`` (vLLM: sent as ``Authorization: Bearer KEY``, answers unchecked); None:
    ``LEAGUEZERO_LLM_KEY_MODE``, else ``"proof"``; ``concurrency``: requests in flight at once;
    ``retries``: how often a reset or refused connection is retried at least (growing pauses,
    at most 2 s apart), and for ``reconnect_s`` seconds in all: a server restarting (vLLM
    takes a minute to load a model) is waited for, with one line on stderr, rather than ending
    a long run; a 429 (``llm serve``: this client's uid has as many expressions compiling as it
    may) is retried the same way for ``reconnect_s``. ``reloader``: called with an adapter's
    name when the server answers a completion with "no such model" (it restarted, or someone
    unloaded it); returning True means the adapter was loaded again and the completion is sent
    once more (:meth:`~.adapters.AdapterSlots.reload`).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        base_model: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        concurrency: int = 32,
        retries: int = 4,
        reconnect_s: float = 120.0,
        key_mode: str | None = None,
    ) -> None:
        self.retries = retries
        self.reconnect_s = reconnect_s
        self.reloader: Callable[[str], bool] | None = None
        url = endpoint.rstrip("/")
        self.endpoint = url.removesuffix("/v1")
        # None: the key of `llm serve --api-key` from the environment, if set there.
        api_key = os.environ.get(API_KEY_ENV) if api_key is None else api_key
        key_mode = (key_mode or os.environ.get(KEY_MODE_ENV) or "proof").strip().lower()
        if key_mode not in KEY_MODES:
            raise LLMError(
                f"key mode {key_mode!r} ({KEY_MODE_ENV}): expected 'proof' (llm serve) or "
                "'bearer' (vLLM and other servers that take a plain key)"
            )
        self.key_mode = key_mode
        bearer = api_key and key_mode == "bearer"
        headers = {"Authorization": f"Bearer {api_key}"} if bearer else {}
        self._proof_key = api_key if api_key and key_mode == "proof" else None
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._http = httpx.Client(
            base_url=self.endpoint, timeout=timeout, headers=headers, limits=limits
        )
        # The proof of a fresh connection's peer goes on a connection of its own (_on_connect).
        self._probe_http = httpx.Client(
            base_url=self.endpoint,
            timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llm-http")
        self._base_model = base_model
        # Constrained answers seen and those outside their expression (see _check_constrained).
        self._constrained_answers = 0
        self._grammar_violations = 0
        self._alarmed = False
        self._count_lock = threading.Lock()  # generate may run in several threads at once

    def close(self) -> None:
        """Close connections and worker threads."""
        self._pool.shutdown(wait=True)
        self._http.close()
        self._probe_http.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- plumbing
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        deadline = time.monotonic() + self.reconnect_s
        data = None if body is None else json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                response = self._exchange(method, path, data)
                # 429: this client (its uid, for llm serve's compile workers) has as many
                # expressions compiling as it may; they end within the server's CPU bound.
                if response.status_code != 429 or time.monotonic() >= deadline:
                    break
                time.sleep(min(2.0, 0.1 * 2**attempt))
                attempt += 1
            except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as err:
                # A reset or refused connection (a full backlog, a server restarting) is
                # retried with a growing pause; a timeout is not (the request may be running).
                if attempt >= self.retries and time.monotonic() >= deadline:
                    raise LLMError(
                        f"cannot reach the LLM server at {self.endpoint} ({err})"
                    ) from None
                if attempt == self.retries:
                    self._say_waiting(err)
                time.sleep(min(2.0, 0.1 * 2**attempt))
                attempt += 1
            except httpx.HTTPError as err:
                raise LLMError(f"cannot reach the LLM server at {self.endpoint} ({err})") from None
        if response.status_code == 404 and path == "/v1/completions":
            raise UnknownAdapterError(f"{self.endpoint}: {_error_message(response)}")
        if response.status_code == 507 or (
            response.status_code >= 400 and "out of memory" in response.text.lower()
        ):
            raise AdapterCapacityError(f"{self.endpoint}: {_error_message(response)}")
        if response.status_code >= 400:
            raise LLMError(
                f"{method} {path} failed ({response.status_code}): {_error_message(response)}"
            )
        try:
            return response.json()
        except ValueError:
            return response.text  # vLLM answers the adapter endpoints in plain text

    def _exchange(self, method: str, path: str, data: bytes | None) -> httpx.Response:
        """One request and its answer, proven both ways when there is a key to prove
        (:mod:`~..serve.key_proof`); raises :class:`~leaguezero.diplomacy.llm.client.LLMError` for
        an answer that does not prove it (nothing of it is read)."""
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self._proof_key is None:
            return self._http.request(method, path, content=data, headers=headers)
        # A connection the pool opens (the first, or one after a restart) is proven before
        # this request goes over it (_on_connect): a squatter does not even get the prompt.
        request = self._http.build_request(
            method, path, content=data, headers=headers, extensions={"trace": self._on_connect}
        )
        return self._proven_send(self._http, request, data or b"")

    def _on_connect(self, event: str, info: dict[str, Any]) -> None:
        """httpx's trace hook: a fresh connection's peer is proven by a ``GET /v1/models`` on
        a connection of its own, made after it (the port's holder now) before the request is
        written to the fresh one."""
        if event not in (
            "connection.connect_tcp.complete",
            "connection.connect_unix_socket.complete",
        ):
            return
        try:
            probe = self._probe_http.build_request("GET", "/v1/models")
            self._proven_send(self._probe_http, probe, b"")
        except BaseException:
            stream = info.get("return_value")
            if stream is not None:
                stream.close()
            raise

    def _proven_send(self, http: httpx.Client, request: httpx.Request, data: bytes):
        """Send ``request`` signed with the key; its answer if it proves the key back."""
        key = self._proof_key
        assert key is not None
        method, path = request.method, request.url.raw_path.decode("ascii")
        request.headers["Authorization"], mac = key_proof.sign_request(key, method, path, data)
        response = http.send(request)
        proof = response.headers.get(key_proof.PROOF_HEADER)
        if key_proof.proven(key, mac, response.status_code, response.content, proof):
            return response
        if response.headers.get(key_proof.ADVERTISE_HEADER) != key_proof.ADVERTISED:
            why = (
                "and it is not `leaguezero llm serve`: another program may hold the port, or "
                f"for vLLM and other servers that take a plain key set {KEY_MODE_ENV}=bearer"
            )
        else:
            why = (
                f"it has another key or none (its --api-key, our {API_KEY_ENV}), or another "
                "program holds the port"
            )
        raise LLMError(
            f"the LLM server at {self.endpoint} answered {method} {path} "
            f"({response.status_code}) without proving it holds the API key, {why}; its answer "
            "was not used"
        )

    def _say_waiting(self, err: Exception) -> None:
        with _WARN_LOCK:
            if self._warned_at is None or time.monotonic() - self._warned_at > self.reconnect_s:
                self._warned_at = time.monotonic()
                print(
                    f"LLM server at {self.endpoint} unreachable ({type(err).__name__}); "
                    f"waiting up to {self.reconnect_s:.0f} s for it to come back",
                    file=sys.stderr,
                    flush=True,
                )

    _warned_at: float | None = None

    def models(self) -> list[dict[str, Any]]:
        """The ``data`` list of ``GET /v1/models``."""
        body = self._request("GET", "/v1/models")
        return list(body.get("data", [])) if isinstance(body, dict) else []

    @property
    def base_model(self) -> str:
        """The server's name for the base model (the model entry without a parent)."""
        if self._base_model is None:
            bases = [m["id"] for m in self.models() if not m.get("parent")]
            if not bases:
                raise LLMError(f"{self.endpoint}/v1/models lists no base model")
            self._base_model = bases[0]
        return self._base_model

    # ------------------------------------------------------------------ adapters
    def list_adapters(self) -> list[str]:
        """Adapters the server has loaded."""
        return [m["id"] for m in self.models() if m.get("parent")]

    def adapter_roots(self) -> dict[str, str | None]:
        """Each loaded adapter's ``root``: the folder it was loaded from, as vLLM lists it
        (0.11.0 ``entrypoints/openai/serving_models.py``: ``root=lora.local_path``) and ``llm
        serve`` too; None where the server does not say."""
        return {
            m["id"]: m.get("root") if isinstance(m.get("root"), str) else None
            for m in self.models()
            if m.get("parent")
        }

    def load_adapter(self, name: str, path: str) -> None:
        """``POST /v1/load_lora_adapter``; ``path`` is on the server's filesystem, which must
        show this process's files at the same absolute paths (a relative path is made absolute
        here, against this process's working directory: the server's is another)."""
        absolute = os.path.abspath(os.fspath(path))
        self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": absolute})

    def unload_adapter(self, name: str) -> None:
        """``POST /v1/unload_lora_adapter``."""
        self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    # ---------------------------------------------------------------- generation
    def generate(
        self,
        prompts: Sequence[str],
        adapters: Sequence[str | None],
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: Sequence[OrderChoices | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt (see :mod:`~leaguezero.diplomacy.llm.client` for the
        conventions); ``choices[i]`` constrains row ``i``: sent as
        ``structured_outputs: {"regex": ...}`` (vLLM >= 0.11.0, or ``leaguezero llm serve``), and
        the answer checked against it."""
        rows = make_requests(prompts, adapters, max_new_tokens, temperature, seed, choices)
        base = self.base_model
        futures = [
            self._pool.submit(
                self._complete,
                r.prompt,
                r.adapter,
                base,
                max_new_tokens,
                temperature,
                r.seed,
                r.extra.get("choices"),
            )
            for r in rows
        ]
        completions = [f.result() for f in futures]
        checked = [
            (completion, self._check_constrained(constraint, completion))
            for row, completion in zip(rows, completions, strict=True)
            if (constraint := row.extra.get("choices")) is not None
        ]
        for completion, kept in checked:
            completion.grammar_violation = not kept
        with self._count_lock:
            self._constrained_answers += len(checked)
            self._grammar_violations += sum(not kept for _, kept in checked)
            alarm = grammar_alarm(self._grammar_violations, self._constrained_answers)
            say = alarm is not None and not self._alarmed
            self._alarmed = self._alarmed or say
        if say:  # once per client: the step events and reports keep counting
            print(f"warning: {self.endpoint}: {alarm}", file=sys.stderr, flush=True)
        return completions

    def _complete(
        self,
        prompt: str,
        adapter: str | None,
        base: str,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: OrderChoices | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "model": adapter if adapter is not None else base,
            "prompt": prompt,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            **NEUTRAL_SAMPLING,
            "seed": seed & 0x7FFF_FFFF_FFFF_FFFF,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        regex = choices.regex() if choices is not None else None
        if regex is not None:
            body["structured_outputs"] = {"regex": regex}
        try:
            reply = self._request("POST", "/v1/completions", body)
        except UnknownAdapterError:
            # The server forgot the adapter (a restart): load it again once, if we know it.
            if adapter is None or self.reloader is None or not self.reloader(adapter):
                raise
            reply = self._request("POST", "/v1/completions", body)
        try:
            choice = reply["choices"][0]
            logprobs_block = choice.get("logprobs") or {}
            logprobs = [float(x) for x in logprobs_block.get("token_logprobs") or []]
            token_ids = choice.get("token_ids")
            if token_ids is None:  # an older server: "token_id:123" spellings
                token_ids = [int(t.split(":", 1)[1]) for t in logprobs_block.get("tokens", [])]
            usage = reply.get("usage") or {}
            return Completion(
                text=choice.get("text", ""),
                token_ids=[int(t) for t in token_ids],
                logprobs=logprobs,
                finish_reason=choice.get("finish_reason") or "length",
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                adapter=adapter,
            )
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise LLMError(f"unexpected completion reply from {self.endpoint}: {err!r}") from None

    def _check_constrained(self, choices: OrderChoices, completion: Completion) -> bool:
        """Whether an answer keeps its constraint, checked byte-wise. One that does not is a
        failed seat, not a crash
        (:attr:`~leaguezero.diplomacy.llm.client.Completion.grammar_violation`): a server whose
        structured-outputs engine masks otherwise than the trainer (xgrammar < 0.2.1, bundled with
        vLLM 0.11-0.14, admits lines mixing two options) or ignores the field (vLLM < 0.11); alarmed
        above :data:`~leaguezero.diplomacy.llm.client.GRAMMAR_ALARM_SHARE` of the answers."""
        return choices.admits(completion.text, completion.finish_reason == "stop")
