"""The request handler of ``llm serve`` (:mod:`.server`): routes, the Host / content-type /
API-key checks of :mod:`.server_http`, and errors as vLLM's error object (short, one line).

With a key, a request proves it (:mod:`.key_proof`: an HMAC per request, or vLLM's plain
``Bearer`` header for other clients) and every answer to a proven request is signed, so the
client can tell this server from another program on its port."""

from __future__ import annotations

import functools
import hmac
import json
import select
import socket
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Protocol

from leaguezero.diplomacy.llm.client import LLMError, UnknownAdapterError
from leaguezero.diplomacy.llm.serve import key_proof
from leaguezero.diplomacy.llm.serve.server_http import (
    SOCKET_TIMEOUT_S,
    RequestError,
    authorized,
    error_body,
    host_allowed,
    is_json,
    log_line,
    peer_identity,
    read_body,
    resident_bytes,
)

if TYPE_CHECKING:
    from leaguezero.diplomacy.llm.model.batching import BatchingGenerator
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
    from leaguezero.diplomacy.llm.serve.regex_sandbox import RegexSandbox


class HandlerOwner(Protocol):
    """What a request handler asks of the server it serves (:class:`~.server.LLMServer`, which
    builds the handler class: the handler does not import it)."""

    backend: HFBackend
    batcher: BatchingGenerator
    api_key: str | None
    allowed_hosts: frozenset[str] | None
    replay_guard: key_proof.ReplayGuard
    max_loras: int | None
    max_cpu_loras: int | None

    @property
    def regex_sandbox_started(self) -> bool: ...

    @property
    def sandbox(self) -> RegexSandbox: ...

    def models(self) -> dict[str, Any]: ...

    def completions(
        self,
        body: dict[str, Any],
        gone: Callable[[], bool] = ...,
        client: Callable[[], str] | str = ...,
    ) -> dict[str, Any]: ...

    def load_lora_adapter(self, body: dict[str, Any]) -> str: ...

    def unload_lora_adapter(self, body: dict[str, Any]) -> str: ...


class LLMRequestHandler(BaseHTTPRequestHandler):
    """One connection's requests; ``owner`` is the :class:`~.server.LLMServer`."""

    owner: HandlerOwner
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S  # per socket operation; read_body bounds the whole body
    _proof_mac: str | None = None  # the request's mac when it proved the key: answers signed
    _proof_digest: str | None = None  # the body's SHA-256 that proof names

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a training run makes thousands of requests

    def _send(self, status: HTTPStatus, payload: Any) -> None:
        # vLLM answers the adapter endpoints with a bare string; JSON-encode it like any body.
        data, kind = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header(key_proof.ADVERTISE_HEADER, key_proof.ADVERTISED)
        if self._proof_mac is not None and self.owner.api_key:
            mac = key_proof.response_mac(
                self.owner.api_key, self._proof_mac, status, key_proof.body_digest(data)
            )
            self.send_header(key_proof.PROOF_HEADER, mac)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, error_body(status, message))

    def handle_one_request(self) -> None:
        # The read deadline runs from waiting for the request line until the body is in.
        self.server.reading(self.connection, True)
        self._proof_mac = self._proof_digest = None  # a connection carries many requests
        try:
            super().handle_one_request()
        finally:
            self.server.reading(self.connection, False)

    def _authorized(self) -> bool:
        if not host_allowed(self, self.owner.allowed_hosts):
            self.close_connection = True  # its body, if any, is not read
            host = (self.headers.get("Host") or "")[:80]
            self._error(
                HTTPStatus.MISDIRECTED_REQUEST,
                f"Host {host!r} is not one this server answers; start it with "
                "--allowed-host NAME to add a name clients use",
            )
            return False
        if not self.path.startswith("/v1") or not self.owner.api_key:
            return True
        refusal = self._key_refusal(self.owner.api_key)
        if not refusal:
            return True
        self.close_connection = True
        self._error(HTTPStatus.UNAUTHORIZED, refusal)
        return False

    def _key_refusal(self, api_key: str) -> str:
        """Why the request does not prove ``api_key``, or "" (see :mod:`.key_proof`)."""
        given = self.headers.get("Authorization", "")
        parsed = key_proof.parse_authorization(given)
        if parsed is None:  # vLLM's plain key (curl, the OpenAI SDKs)
            return "" if authorized(self, api_key) else "Unauthorized"
        nonce, stamp, digest, mac = parsed
        wanted = key_proof.request_mac(api_key, nonce, stamp, self.command, self.path, digest)
        if not hmac.compare_digest(mac.encode(), wanted.encode()):
            return "Unauthorized"  # unsigned: the sender may not have the key
        self._proof_mac, self._proof_digest = mac, digest  # a key holder: answers are signed
        if self.command != "POST" and digest != key_proof.body_digest(b""):
            return "the request's proof names a body, and it has none"
        return self.owner.replay_guard.check(nonce, stamp)

    def _peer(self) -> str:
        """Who sent this request, for fair shares (the uid on loopback, else the address)."""
        return peer_identity(self.connection, self.client_address)

    def _client_gone(self) -> bool:
        """Whether the client closed its end while its request is being served."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    def do_GET(self) -> None:
        self.server.reading(self.connection, False)
        if not self._authorized():
            return
        if self.path == "/v1/models":
            self._send(HTTPStatus.OK, self.owner.models())
        elif self.path == "/health":
            # Unhealthy once the batcher thread is gone: completions could never be answered.
            worker = getattr(self.owner.batcher, "_worker", None)
            if worker is not None and not worker.is_alive():
                self._error(HTTPStatus.SERVICE_UNAVAILABLE, "the batcher thread has stopped")
            else:
                self._send(HTTPStatus.OK, {"status": "ok"})
        elif self.path == "/stats":  # ours, not vLLM's: what the batcher has done
            batcher = self.owner.batcher
            stats = {
                "batches": batcher.batches,
                "rows": batcher.rows,
                "max_rows_in_batch": batcher.max_rows_seen,
                "max_adapters_in_batch": batcher.max_adapters_seen,
                "max_loras": self.owner.max_loras,
                "max_cpu_loras": self.owner.max_cpu_loras,
                "adapters_loaded": len(self.owner.backend.list_adapters()),
            }
            if self.owner.regex_sandbox_started:
                stats.update(self.owner.sandbox.cache_stats())
            stats.update(resident_bytes())  # what the process holds, beside what it counts
            self._send(HTTPStatus.OK, stats)
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}")

    def do_POST(self) -> None:
        routes = {
            "/v1/completions": functools.partial(
                self.owner.completions, gone=self._client_gone, client=self._peer
            ),
            "/v1/load_lora_adapter": self.owner.load_lora_adapter,
            "/v1/unload_lora_adapter": self.owner.unload_lora_adapter,
        }
        handler = routes.get(self.path)
        if not self._authorized():
            return
        if handler is None:
            self.close_connection = True  # the body is not read
            self._error(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}")
            return
        if not is_json(self):
            self.close_connection = True
            self._error(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "send the body with 'Content-Type: application/json'",
            )
            return
        try:
            try:
                data = read_body(self)
                self.server.reading(self.connection, False)  # a completion may take long
            except RequestError:
                self.close_connection = True  # what is left of the body is not a request
                raise
            if self._proof_digest is not None and key_proof.body_digest(data) != (
                self._proof_digest
            ):
                raise RequestError(
                    "the request body is not the one its proof names", HTTPStatus.UNAUTHORIZED
                )
            body = json.loads(data or b"{}")
            if not isinstance(body, dict):
                raise RequestError("the request body must be a JSON object")
            result = handler(body)
        except RequestError as err:
            self._error(err.status, str(err))
        except json.JSONDecodeError as err:
            self._error(HTTPStatus.BAD_REQUEST, f"the request body is not JSON ({err.msg})")
        except RecursionError:
            self._error(HTTPStatus.BAD_REQUEST, "the request body nests too deeply")
        except UnknownAdapterError as err:  # unloaded between the check and the batch
            self._error(HTTPStatus.NOT_FOUND, str(err))
        except (LLMError, ValueError) as err:
            self._error(HTTPStatus.BAD_REQUEST, str(err).splitlines()[0][:300] if str(err) else "")
        except (ConnectionError, TimeoutError):
            raise  # the client went away: BoundedHTTPServer logs one line
        except Exception as err:  # keep serving; the details go to the log, not the client
            log_line(f"{self.path}: {type(err).__name__}: {err}")
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error ({type(err).__name__})")
        else:
            self._send(HTTPStatus.OK, result)
