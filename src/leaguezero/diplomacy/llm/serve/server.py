"""The hf backend behind the OpenAI-compatible HTTP subset that vLLM serves.

Endpoints (JSON bodies; errors as ``{"error": {"message", "type", "code"}}``):

- ``GET /v1/models`` — the base model (``id`` = its served name) and every loaded adapter
  (``parent`` = the base model), as vLLM lists them.
- ``POST /v1/completions`` — ``model`` (adapter name, or the base model's name), ``prompt``
  (a string or a list), ``max_tokens``, ``temperature``, ``seed``, ``logprobs`` (the sampled
  tokens' log-probs come back in ``choices[i].logprobs.token_logprobs``), ``return_token_ids``
  (``choices[i].token_ids``). Like vLLM, every prompt of one request uses the same seed. The
  fields that shape vLLM's distribution (``top_p``, ``top_k``, ``min_p``, the repetition,
  presence and frequency penalties) are taken at their neutral values only — what the client
  pins (:data:`~leaguezero.diplomacy.llm.client.NEUTRAL_SAMPLING`) and all this server samples; any
  other value, and the other sampling fields it does not implement (``stop``, ``logit_bias``,
  ``min_tokens``, ...) with a non-default value, get 400 rather than a silently different
  distribution. ``structured_outputs`` as vLLM (>= 0.11.0) takes it: ``{"regex": ...}`` or
  ``{"choice": [...]}`` constrains every prompt of the request
  (:mod:`~leaguezero.diplomacy.llm.orders.constrained`; the token masks come from outlines-core,
  log-probs are over the allowed tokens); ``json``, ``grammar`` and the other kinds are refused
  with 400. A request's expression is compiled in a bounded worker process (:mod:`.regex_sandbox`:
  CPU time, memory, stopped when the client leaves; workers shared fairly between clients; results
  in a cache bounded in entries and measured bytes, refusals in one of their own); one beyond a
  bound gets 400, a client with too many compiles already 429, and 503 when every worker stayed
  busy.
- ``POST /v1/load_lora_adapter`` — ``{"lora_name", "lora_path"}``; ``POST
  /v1/unload_lora_adapter`` — ``{"lora_name"}`` (vLLM's runtime endpoints).
- ``GET /health``; ``GET /stats`` (ours: batches, rows, the most rows and distinct adapters
  one batch held, the compile caches and queues, and the process's resident memory).

Limits, as vLLM's: ``max_loras`` distinct adapters per forward batch (rows of other adapters
wait for a later batch), ``max_cpu_loras`` adapters resident (a load beyond it gets 507).

Requests are handled in threads and their rows go through one
:class:`~leaguezero.diplomacy.llm.model.batching.BatchingGenerator`, so concurrent requests (seats,
games) share batches. The server binds to loopback by default. Every request needs a ``Host`` header
naming an allowed host (loopback names, the bound address, ``allowed_hosts``: ``--allowed-host``),
else 421, and every POST ``Content-Type: application/json``, else 415: a web page cannot send either
(DNS rebinding, cross-site "simple" requests; :mod:`.server_http`). With ``api_key``
(``--api-key``, as vLLM's) every ``/v1`` route needs the key (vLLM guards all of ``/v1``,
completions and model listing included): proven by an HMAC per request (:mod:`.key_proof`,
what :class:`~..remote.openai_client.OpenAIClient` sends; the answer is then signed, so the
client knows it is this server's) or, for other clients, vLLM's ``Authorization: Bearer KEY``;
``/health`` and ``/stats`` stay open.
Without one, anyone who can reach the server (on loopback: every user of this machine) can load
and unload adapters (loads only from folders and regular files owned by the server's user:
:mod:`~leaguezero.diplomacy.llm.model.adapter_files`); on a shared machine, set the key.

Hostile input is bounded (:mod:`.server_http`): a body needs a ``Content-Length`` of at most
8 MiB, connections served at once are bounded, prompts are tokenised in the request's thread
and bounded in tokens, and bad input gets a 4xx with a short message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from leaguezero.diplomacy.llm.client import (
    LLMError,
    UnknownAdapterError,
)
from leaguezero.diplomacy.llm.model.adapter_files import check_adapter_name
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.constrained import choice_regex
from leaguezero.diplomacy.llm.runtime import make_batcher
from leaguezero.diplomacy.llm.serve.completion_request import (
    completion_request,
    completion_response,
    request_field,
    shown_name,
)
from leaguezero.diplomacy.llm.serve.key_proof import ReplayGuard
from leaguezero.diplomacy.llm.serve.regex_sandbox import (
    ClientOverLimit,
    CompileLimits,
    CompilerBusy,
    RegexRefused,
    RegexSandbox,
)
from leaguezero.diplomacy.llm.serve.server_handler import LLMRequestHandler
from leaguezero.diplomacy.llm.serve.server_http import (
    DEFAULT_MAX_CONNECTIONS,
    MAX_BODY_BYTES,
    BoundedHTTPServer,
    RequestError,
    host_allowlist,
)

__all__ = ["MAX_BODY_BYTES", "LLMServer", "RequestError"]
# A constraint's expression (ours: ~5 kB for 17 units); compiling one costs the server CPU.
MAX_REGEX_CHARS = 64 * 1024
MAX_PATH_CHARS = 4096  # PATH_MAX
CHARS_PER_TOKEN_BOUND = 32  # a prompt longer than this many chars per allowed token is refused


class LLMServer:
    """An HTTP server for one :class:`HFBackend`; :meth:`start` runs it in a thread."""

    def __init__(
        self,
        backend: HFBackend,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_loras: int | None = None,
        max_cpu_loras: int | None = None,
        api_key: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_prompt_tokens: int | None = None,
        allowed_hosts: list[str] | tuple[str, ...] = (),
        compile_limits: CompileLimits | None = None,
    ) -> None:
        self.backend = backend
        self.api_key = api_key or None
        self.replay_guard = ReplayGuard()  # nonces of proven requests (no replays)
        self.allowed_hosts = host_allowlist(host, allowed_hosts)
        self.compile_limits = compile_limits or CompileLimits()
        self._sandbox: RegexSandbox | None = None  # started on the first constrained request
        self._sandbox_lock = threading.Lock()
        # Prompts longer than this are refused before they reach the batcher.
        self.max_prompt_tokens = max_prompt_tokens or min(backend.max_positions, 1 << 15)
        # Loads are serialised (a name is checked and registered by one load at a time); they
        # read files outside the backend lock, so completions go on meanwhile.
        self._load_lock = threading.Lock()
        # vLLM's two limits: adapters in one batch (others wait for a later batch), and
        # adapters resident at once (a load beyond it is refused: 507, the client's
        # AdapterCapacityError, which the league answers with cluster seating).
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        # Each loaded adapter's lora_path, listed as its model card's `root` (as vLLM lists
        # it: a client checks that a name it expects serves the folder it expects).
        self._adapter_paths: dict[str, str] = {}
        self.batcher = make_batcher(backend, max_adapters=max_loras)
        server = self

        class Handler(LLMRequestHandler):
            owner = server

        self.httpd = BoundedHTTPServer((host, port), Handler, max_connections)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (the client appends ``/v1/...``)."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LLMServer:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`shutdown` (or Ctrl-C in the caller)."""
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.batcher.close()
        if self._sandbox is not None:
            self._sandbox.close()

    @property
    def regex_sandbox_started(self) -> bool:
        """Whether a constrained request has started the compile workers."""
        return self._sandbox is not None

    @property
    def sandbox(self) -> RegexSandbox:
        """The compile workers of request expressions (:mod:`.regex_sandbox`)."""
        with self._sandbox_lock:
            if self._sandbox is None:
                vocabulary = self.backend.constraints.vocabulary
                self._sandbox = RegexSandbox(vocabulary, self.compile_limits)
            return self._sandbox

    # ------------------------------------------------------------- endpoint logic
    def models(self) -> dict[str, Any]:
        now = int(time.time())
        base = self.backend.model_name
        data = [
            {
                "id": base,
                "object": "model",
                "created": now,
                "owned_by": "leaguezero",
                "root": base,
                "parent": None,
            }
        ]
        for name in self.backend.list_adapters():
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": now,
                    "owned_by": "leaguezero",
                    "root": self._adapter_paths.get(name, name),
                    "parent": base,
                }
            )
        return {"object": "list", "data": data}

    def completions(
        self,
        body: dict[str, Any],
        gone: Callable[[], bool] = lambda: False,
        client: Callable[[], str] | str = "",
    ) -> dict[str, Any]:
        """One completion request; ``gone()`` says the client has left (stops a compile);
        ``client`` says who asks (:func:`~.server_http.peer_identity`: compile workers are
        shared fairly between clients)."""
        adapters = self.backend.list_adapters()
        request = completion_request(body, self.backend.model_name, adapters)
        rows = request.rows
        for row in rows:
            row.extra["prompt_ids"] = self._tokenize(row.prompt, row.max_new_tokens)
        regex = self._structured_regex(body.get("structured_outputs"))
        if regex is not None:
            try:  # compiled in a bounded worker, never in the batcher's thread
                index = self.sandbox.index(regex, gone, client)
            except RegexRefused as err:
                raise RequestError(f"structured_outputs: {err}") from None
            except ClientOverLimit as err:
                raise RequestError(str(err), status=HTTPStatus.TOO_MANY_REQUESTS) from None
            except CompilerBusy as err:
                raise RequestError(str(err), status=HTTPStatus.SERVICE_UNAVAILABLE) from None
            for row in rows:
                row.extra["regex"] = regex
                row.extra["regex_index"] = index
        return completion_response(request, self.batcher.submit(rows), self.backend.tokenizer)

    @staticmethod
    def _structured_regex(spec: Any) -> str | None:
        """The regular expression a request's ``structured_outputs`` asks for (None: none)."""
        if spec is None:
            return None
        if not isinstance(spec, dict):
            raise RequestError("'structured_outputs' must be an object")
        kinds = {k for k, v in spec.items() if v is not None and v is not False}
        unsupported = kinds - {"regex", "choice"}
        if unsupported:
            raise RequestError(
                f"structured_outputs: {', '.join(sorted(unsupported))} not supported by this "
                "server (regex and choice are)"
            )
        if len(kinds) != 1:
            raise RequestError("structured_outputs: give exactly one of regex, choice")
        if "regex" in kinds:
            regex = spec["regex"]
            if not isinstance(regex, str) or not regex:
                raise RequestError("structured_outputs.regex must be a non-empty string")
            if len(regex) > MAX_REGEX_CHARS:
                raise RequestError(f"structured_outputs.regex longer than {MAX_REGEX_CHARS}")
            return regex
        options = spec["choice"]
        if (
            not isinstance(options, list)
            or not options
            or not all(isinstance(o, str) and o for o in options)
        ):
            raise RequestError("structured_outputs.choice must be a list of non-empty strings")
        if sum(len(o) for o in options) > MAX_REGEX_CHARS:
            raise RequestError(f"structured_outputs.choice longer than {MAX_REGEX_CHARS}")
        return choice_regex(options)

    def _tokenize(self, prompt: str, max_tokens: int) -> list[int]:
        # Here, in the request's thread: a long prompt costs its sender, not every request
        # waiting on the batcher.
        bound = self.max_prompt_tokens
        if len(prompt) > bound * CHARS_PER_TOKEN_BOUND:
            raise RequestError(f"prompt of {len(prompt)} characters is too long ({bound} tokens)")
        ids = self.backend.encode(prompt)
        if len(ids) > bound:
            raise RequestError(f"prompt of {len(ids)} tokens exceeds --max-prompt-tokens {bound}")
        if len(ids) + max_tokens > self.backend.max_positions:
            raise RequestError(
                f"prompt of {len(ids)} tokens + max_tokens {max_tokens} exceeds the model's "
                f"{self.backend.max_positions} positions"
            )
        return ids

    def load_lora_adapter(self, body: dict[str, Any]) -> str:
        name = request_field(body, "lora_name", str, None)
        path = request_field(body, "lora_path", str, None)
        if not name or not path:
            raise RequestError("'lora_name' and 'lora_path' are required")
        try:
            check_adapter_name(name)
        except LLMError as err:
            raise RequestError(str(err)) from None
        if len(path) > MAX_PATH_CHARS:
            raise RequestError(f"'lora_path' longer than {MAX_PATH_CHARS} characters")
        with self._load_lock:
            loaded = self.backend.list_adapters()
            if name in loaded:
                raise RequestError(f"The lora adapter '{name}' has already been loaded.")
            if self.max_cpu_loras is not None and len(loaded) >= self.max_cpu_loras:
                raise RequestError(
                    f"cannot load adapter {name!r}: {len(loaded)} adapters are loaded and "
                    f"--max-cpu-loras is {self.max_cpu_loras}; unload one first",
                    status=HTTPStatus.INSUFFICIENT_STORAGE,
                )
            try:
                self.backend.load_adapter(name, path)
            except (LLMError, ValueError, OSError) as err:
                raise RequestError(f"cannot load adapter {name!r}: {err}") from None
            self._adapter_paths[name] = path
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload_lora_adapter(self, body: dict[str, Any]) -> str:
        name = request_field(body, "lora_name", str, None)
        if not name:
            raise RequestError("'lora_name' is required")
        try:
            self.backend.unload_adapter(name)
            self._adapter_paths.pop(name, None)
        except UnknownAdapterError:
            raise RequestError(
                f"The lora adapter '{shown_name(name)}' cannot be found.",
                status=HTTPStatus.NOT_FOUND,
            ) from None
        return f"Success: LoRA adapter '{name}' removed successfully."
