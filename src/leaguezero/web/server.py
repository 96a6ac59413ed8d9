"""How ``leaguezero web`` listens: uvicorn with its own limits, and one protocol tweak.

uvicorn's settings bound keep-alive (``timeout_keep_alive``), concurrent requests
(``limit_concurrency``: a 503 beyond) and the size of a request's head
(``h11_max_incomplete_event_size``). Two bounds it lacks are added by :class:`BoundedH11Protocol`,
uvicorn's h11 protocol with:

- a **request timeout**: a connection whose request (line, headers, body) has not fully
  arrived :data:`~leaguezero.web.limits.REQUEST_TIMEOUT_S` after it opened, or after its last
  answer, is closed (uvicorn arms no timer before the first byte, nor while a head trickles in);
- a **connection cap**: beyond :data:`~leaguezero.web.limits.MAX_CONNECTIONS` open connections
  (a quarter of the open-file limit at most) the oldest one waiting for a request is closed, so idle
  sockets cannot use up the process's file descriptors and lock everyone out; a small listen
  ``backlog`` keeps asyncio from accepting more at once than the cap leaves room for.
"""

from __future__ import annotations

import asyncio
import itertools
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from leaguezero.web.limits import (
    KEEP_ALIVE_S,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    REQUEST_TIMEOUT_S,
)

_opened = itertools.count()  # connections' opening order: the oldest idle one goes first


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request timeout and a connection cap (module docstring)."""

    request_timeout_s = REQUEST_TIMEOUT_S
    max_connections = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._order = next(_opened)
        self._request_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        # Connections closed but not yet gone (their files are freed a loop turn later) do
        # not count, and are not closed twice.
        live = [c for c in self.connections if not c.transport.is_closing()]
        if len(live) > self.max_connections:
            idle = [c for c in live if c is not self and c._waiting_for_request()]
            victim = min(idle, key=lambda c: c._order) if idle else self
            victim.transport.close()
            if victim is self:
                return
        self._arm_request_timer()

    def _waiting_for_request(self) -> bool:
        return self.conn.their_state is not h11.DONE  # not a request the app is working on

    def _arm_request_timer(self) -> None:
        self._cancel_request_timer()
        self._request_timer = self.loop.call_later(self.request_timeout_s, self._request_timeout)

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_timeout(self) -> None:
        self._request_timer = None
        if self.conn.their_state is not h11.DONE and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.DONE:  # the whole request is in: the app has it now
            self._cancel_request_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
            self._arm_request_timer()  # the next request on this connection has the same bound

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_request_timer()
        super().connection_lost(exc)


def raise_file_limit() -> None:
    """Lift the soft open-file limit to the hard one (1,024 is a common soft default)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def uvicorn_config(
    app, host: str, port: int, log_level: str = "warning", request_timeout_s: float | None = None
):
    """The uvicorn config every server of this app runs with (the command's and the tests');
    ``request_timeout_s`` overrides :data:`~leaguezero.web.limits.REQUEST_TIMEOUT_S`."""
    import uvicorn

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A quarter of the file limit at most: the app itself holds files too (libraries,
    # checkpoints, logs), connections accepted but not yet seen by the protocol hold one each,
    # and an accept that fails for want of a file stalls everyone.
    room = soft // 4 if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS
    cap = max(16, min(MAX_CONNECTIONS, room))
    bounds = {"max_connections": cap, "request_timeout_s": request_timeout_s or REQUEST_TIMEOUT_S}
    protocol = type("BoundedH11", (BoundedH11Protocol,), bounds)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol,
        timeout_keep_alive=KEEP_ALIVE_S,
        # uvicorn counts connections too, closed ones among them until they are gone: room
        # over the cap, so a connection that made room is served.
        limit_concurrency=2 * cap,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        # asyncio accepts up to `backlog` connections in one go before any of them is seen by
        # the protocol: a small one lets the cap close idle ones before the files run out.
        backlog=max(8, cap // 8),
    )
