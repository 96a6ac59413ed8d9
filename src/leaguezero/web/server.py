"""How ``leaguezero web`` listens: uvicorn with its own limits, and one protocol tweak.

uvicorn's settings bound keep-alive (``timeout_keep_alive``), concurrent requests
(``limit_concurrency``: a 503 beyond) and the size of a request's head
(``h11_max_incomplete_event_size``). Two bounds it lacks are added by :class:`BoundedH11Protocol`,
uvicorn's h11 protocol with:

- a **request timeout**: a connection whose request (line, headers, body) has not fully
  arrived :data:`~leaguezero.web.limits.REQUEST_TIMEOUT_S` after it opened, or after its last
  answer, is closed (uvicorn arms no timer before the first byte, nor while a head trickles in);
- a **connection cap**: beyond :data:`~leaguezero.web.limits.MAX_CONNECTIONS` open connections
  (a quarter of the open-file limit at most) the oldest one waiting for a request is shed, so idle
  sockets cannot use up the process's file descriptors and lock everyone out; a small listen
  ``backlog`` keeps asyncio from accepting more at once than the cap leaves room for.

A shed connection gets ``503`` (``Retry-After``) rather than a bare close: in a burst, the
oldest connection "waiting" is often one whose request is in the socket's buffer, unread, and
closing it then sends a reset that loses any answer. So the answer is written, the sending side
shut (``write_eof``), and what the client still sends discarded until it closes or
:data:`~leaguezero.web.limits.SHED_LINGER_S` pass (a lingering close); at most
:data:`~leaguezero.web.limits.MAX_LINGERING` connections linger at once, beyond which one is
closed at once after its answer (an idle socket that never sent a byte loses nothing by it).
"""

from __future__ import annotations

import asyncio
import itertools
import resource
from collections.abc import Callable

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from leaguezero.web.limits import (
    KEEP_ALIVE_S,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    MAX_LINGERING,
    REQUEST_TIMEOUT_S,
    SHED_LINGER_S,
)

_opened = itertools.count()  # connections' opening order: the oldest idle one goes first
# The client's h11 states once its whole request is in: DONE, or MUST_CLOSE when it sent
# "Connection: close" (an HTTP/1.0 or urllib client), CLOSED after it shut its side.
REQUEST_IN = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)
_SHED_BODY = b'{"error":"busy: the server has too many connections open; try again in a moment"}'
SHED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_SHED_BODY), _SHED_BODY)
)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request timeout and a connection cap (module docstring)."""

    request_timeout_s = REQUEST_TIMEOUT_S
    max_connections = MAX_CONNECTIONS
    max_lingering = MAX_LINGERING
    linger_s = SHED_LINGER_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._order = next(_opened)
        self._request_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._shed = False
        super().connection_made(transport)
        # Connections closed or shed but not yet gone (their files are freed a loop turn, or
        # a linger, later) do not count, and are not shed twice.
        live = [c for c in self.connections if not c._shed and not c.transport.is_closing()]
        if len(live) > self.max_connections:
            idle = [c for c in live if c is not self and c._waiting_for_request()]
            victim = min(idle, key=lambda c: c._order) if idle else self
            lingering = sum(c._shed and not c.transport.is_closing() for c in self.connections)
            victim._shed_connection(linger=lingering < self.max_lingering)
            if victim is self:
                return
        self._arm_request_timer()

    def _shed_connection(self, linger: bool) -> None:
        """Answer 503 and close without a reset eating the answer (module docstring)."""
        self._shed = True
        self._cancel_request_timer()
        self._unset_keepalive_if_required()
        self.transport.write(SHED_RESPONSE)
        if not linger or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()  # the client reads the answer, then its EOF closes ours
        self._linger_timer = self.loop.call_later(self.linger_s, self.transport.close)

    def _waiting_for_request(self) -> bool:
        """Not a request the app is working on: none whole yet, and no answer under way."""
        answering = self.cycle is not None and not self.cycle.response_complete
        return self.conn.their_state not in REQUEST_IN and not answering

    def _arm_request_timer(self) -> None:
        self._cancel_request_timer()
        self._request_timer = self.loop.call_later(self.request_timeout_s, self._request_timeout)

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_timeout(self) -> None:
        self._request_timer = None
        if self.conn.their_state not in REQUEST_IN and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._shed:
            return  # answered already: what the client still sends is read and dropped
        super().data_received(data)
        if self.conn.their_state in REQUEST_IN:  # the whole request is in: the app has it now
            self._cancel_request_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state not in REQUEST_IN:
            self._arm_request_timer()  # the next request on this connection has the same bound

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_request_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)


class ReadyServer(uvicorn.Server):
    """A ``uvicorn.Server`` that calls ``on_ready`` once its sockets listen: what
    ``leaguezero web`` prints its "serving on" line from, so the address it prints accepts."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None = None):
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets=sockets)
        # started is set once every socket listens and the lifespan is up; a failed bind
        # exits inside startup, before this line.
        if self.started and self.on_ready is not None:
            self.on_ready()


def raise_file_limit() -> None:
    """Lift the soft open-file limit to the hard one (1,024 is a common soft default)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def uvicorn_config(
    app,
    host: str,
    port: int,
    log_level: str = "warning",
    request_timeout_s: float | None = None,
    max_connections: int | None = None,
):
    """The uvicorn config every server of this app runs with (the command's and the tests');
    ``request_timeout_s`` overrides :data:`~leaguezero.web.limits.REQUEST_TIMEOUT_S`,
    ``max_connections`` the connection cap (a test's small one)."""
    import uvicorn

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A quarter of the file limit at most: the app itself holds files too (libraries,
    # checkpoints, logs), connections accepted but not yet seen by the protocol hold one each,
    # and an accept that fails for want of a file stalls everyone.
    room = soft // 4 if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS
    cap = max_connections or max(16, min(MAX_CONNECTIONS, room))
    bounds = {
        "max_connections": cap,
        "max_lingering": min(MAX_LINGERING, cap),  # their files count too: twice the cap at most
        "request_timeout_s": request_timeout_s or REQUEST_TIMEOUT_S,
    }
    protocol = type("BoundedH11", (BoundedH11Protocol,), bounds)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol,
        timeout_keep_alive=KEEP_ALIVE_S,
        # uvicorn counts connections too, closed and lingering ones among them until they are
        # gone: room over the cap and the lingering, so a connection that made room is served.
        limit_concurrency=2 * cap + bounds["max_lingering"],
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        # asyncio accepts up to `backlog` connections in one go before any of them is seen by
        # the protocol: a small one lets the cap close idle ones before the files run out.
        backlog=max(8, cap // 8),
    )
