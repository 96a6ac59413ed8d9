"""The HTTP plumbing of ``llm serve`` that keeps hostile clients bounded (:mod:`.server`).

- :class:`BoundedHTTPServer`: at most ``max_connections`` connections are served at once (one
  thread each); a connection beyond it is answered 503 at once and closed, so slow clients
  cannot pile up threads. A request must be read (request line, headers and body) within
  ``read_deadline_s`` of the server starting to wait for it, else a watchdog shuts its socket:
  a client trickling a byte at a time cannot hold a thread for long. A client that goes away
  is logged in one line, not a traceback.
- :func:`read_body`: a request body needs a ``Content-Length`` (missing: 411; negative or not a
  number: 400; above the bound: 413) and must arrive within ``BODY_DEADLINE_S`` in all.
- :func:`authorized`: the ``Authorization: Bearer KEY`` check of ``--api-key``, in constant time.
- :func:`peer_identity`: who a connection is for fair shares (the compile workers): the uid
  owning the client's socket on loopback (every local client is 127.0.0.1, and a hostile one
  opens as many connections as it likes), the address otherwise.
- :func:`host_allowed` and :func:`is_json`: what keeps web pages out. A page in a browser on this
  machine can send a "simple" cross-site POST (``text/plain``, no preflight) to a loopback port,
  and by DNS rebinding even read the answer; it cannot choose the ``Host`` header (the browser
  writes the page's host name) nor send ``Content-Type: application/json`` without a CORS
  preflight, which this server never grants. So every request needs an allowed ``Host`` and
  every POST a JSON content type.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from leaguezero.common.peers import loopback_uid

# The API key of `llm serve --api-key` and of the client (OpenAIClient), from the environment.
API_KEY_ENV = "LEAGUEZERO_LLM_API_KEY"
MAX_BODY_BYTES = 8 << 20
DEFAULT_MAX_CONNECTIONS = 256  # above a 200-request flood; the client opens 32 per process
BODY_DEADLINE_S = 30.0  # the whole body, however slowly it trickles in
SOCKET_TIMEOUT_S = 30.0  # any one read or write (an idle keep-alive connection too)
READ_DEADLINE_S = 60.0  # waiting for a request and reading it, however it trickles in
# Host names every server accepts; the bound address and --allowed-host add to them.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"  # --allowed-host '*': no Host check (behind a proxy that does its own)
MAX_MESSAGE_CHARS = 600  # an error message, however long the name or path it quotes


class RequestError(ValueError):
    """A malformed request; becomes a 400 (or the given status) with the message."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def log_line(message: str) -> None:
    """One line on stderr (the server's log)."""
    print(f"llm serve: {message}", file=sys.stderr, flush=True)


def error_body(status: HTTPStatus, message: str) -> dict[str, Any]:
    """vLLM's error object."""
    kind = {
        HTTPStatus.NOT_FOUND: "NotFoundError",
        HTTPStatus.UNAUTHORIZED: "AuthenticationError",
    }.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    if len(message) > MAX_MESSAGE_CHARS:  # names and paths from requests are echoed
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return {"error": {"message": message, "type": kind, "code": int(status)}}


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server with a bound on connections served at once (see module doc)."""

    # The standard library's listen backlog is 5: a group of games sends dozens of requests
    # at once, and connections beyond the backlog were reset.
    request_queue_size = 1024
    daemon_threads = True
    read_deadline_s = READ_DEADLINE_S

    def __init__(self, address, handler, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._reading: dict[socket.socket, float] = {}  # socket -> when its read must be done
        self._reading_lock = threading.Lock()
        self._stop_watchdog = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._watchdog, name="llm-read-watchdog", daemon=True).start()

    def reading(self, sock: socket.socket, active: bool) -> None:
        """Arm (``active``) or disarm the read deadline of connection ``sock``."""
        with self._reading_lock:
            if active:
                self._reading[sock] = time.monotonic() + self.read_deadline_s
            else:
                self._reading.pop(sock, None)

    def _watchdog(self) -> None:
        while not self._stop_watchdog.wait(min(1.0, self.read_deadline_s / 4)):
            now = time.monotonic()
            with self._reading_lock:
                late = [sock for sock, deadline in self._reading.items() if deadline < now]
                for sock in late:
                    del self._reading[sock]
            for sock in late:  # unblocks the handler's recv: it sees the end of the stream
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._stop_watchdog.set()
        super().server_close()

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        # Answered from the accepting thread: a short write to a fresh socket's empty buffer.
        message = f"server busy: {self.max_connections} connections are open; retry later"
        data = json.dumps(error_body(HTTPStatus.SERVICE_UNAVAILABLE, message)).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        try:
            request.settimeout(1.0)
            request.sendall(head.encode() + data)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, (ConnectionError, TimeoutError)):
            log_line(f"client {client_address[0]}:{client_address[1]} went away ({err!r})")
        else:  # keep serving; one line, not a traceback per request
            log_line(f"error serving {client_address[0]}: {type(err).__name__}: {err}")


def read_body(handler: BaseHTTPRequestHandler, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body (see module doc); raises :class:`RequestError`."""
    if handler.headers.get("Transfer-Encoding"):
        raise RequestError("chunked bodies are not accepted; send a Content-Length",
                           HTTPStatus.LENGTH_REQUIRED)  # fmt: skip
    raw = handler.headers.get("Content-Length")
    if raw is None:
        raise RequestError("a Content-Length header is required", HTTPStatus.LENGTH_REQUIRED)
    if not raw.strip().isdigit():
        raise RequestError("Content-Length must be a non-negative integer")
    length = int(raw)
    if length > limit:
        raise RequestError(
            f"request body of {length} bytes is larger than {limit}",
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        )
    deadline = time.monotonic() + BODY_DEADLINE_S
    chunks, size = [], 0
    while size < length:
        if time.monotonic() > deadline:
            raise RequestError("request body not received in time", HTTPStatus.REQUEST_TIMEOUT)
        chunk = handler.rfile.read1(min(length - size, 1 << 16))
        if not chunk:
            raise ConnectionResetError("client closed the connection mid-body")
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def authorized(handler: BaseHTTPRequestHandler, api_key: str | None) -> bool:
    """Whether the request carries ``Authorization: Bearer api_key`` (always, without a key)."""
    if not api_key:
        return True
    given = handler.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())


def host_allowlist(
    bind_host: str, extra: list[str] | tuple[str, ...] = ()
) -> frozenset[str] | None:
    """The Host names a server bound to ``bind_host`` accepts: loopback names, the bound
    address (unless a wildcard) and ``extra`` (``--allowed-host``); None when ``extra`` holds
    ``*`` (no check)."""
    names = {name.strip().lower().strip("[]") for name in extra if name.strip()}
    if ANY_HOST in names:
        return None
    names.update(LOOPBACK_HOSTS)
    if bind_host not in ("", "0.0.0.0", "::"):
        names.add(bind_host.lower().strip("[]"))
    return frozenset(names)


def host_allowed(handler: BaseHTTPRequestHandler, allowed: frozenset[str] | None) -> bool:
    """Whether the request has exactly one ``Host`` header naming an allowed host (any port)."""
    if allowed is None:
        return True
    values = handler.headers.get_all("Host") or []
    if len(values) != 1:
        return False
    host = values[0].strip().lower()
    if host.startswith("["):  # [::1]:8000
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host in allowed


def is_json(handler: BaseHTTPRequestHandler) -> bool:
    """Whether the request says ``Content-Type: application/json`` (parameters allowed)."""
    kind = handler.headers.get("Content-Type", "")
    return kind.partition(";")[0].strip().lower() == "application/json"


def peer_identity(sock: socket.socket, client_address: tuple) -> str:
    """Who is on the other end of ``sock`` (see module doc): ``uid N`` for a loopback peer
    whose socket the kernel names (:func:`leaguezero.common.peers.loopback_uid`), else
    ``address A``."""
    try:
        uid = loopback_uid(client_address, sock.getsockname())
    except OSError:
        uid = None
    return f"address {client_address[0]}" if uid is None else f"uid {uid}"


def resident_bytes() -> dict[str, int]:
    """The process's resident memory now and at its peak (``/stats``), from
    ``/proc/self/status``; empty where there is none."""
    fields = {"VmRSS": "rss_bytes", "VmHWM": "rss_peak_bytes"}
    found: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in fields:
                found[fields[name]] = int(value.split()[0]) * 1024
    return found
