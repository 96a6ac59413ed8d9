"""One connection per inference endpoint: its socket, health and the requests sent on it.

:class:`~leaguezero.az.inference.client.InferenceClient` keeps one :class:`Link` per address of
``tcp://h1:p,tcp://h2:p`` and routes each request to the live link with the fewest pending rows.
This module holds the per-link state and the blocking socket helpers; the routing, failover and
reconnect policy live in the client.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from leaguezero.az.inference.endpoint import Endpoint
from leaguezero.az.inference.protocol import LENGTH, MAX_FRAME_BYTES, ProtocolError, Status


@dataclass
class Ticket:
    """One request waiting for its reply (matched by ``request_id``)."""

    future: Future
    frame: bytes
    rows: int
    link: int | None = None  # index of the link it is assigned to; None: parked (all down)
    pinned: bool = False  # a control/health request for one endpoint: fails, never moves
    sent_generation: int = -1  # connection generation this frame was last sent on
    submitted: float = field(default_factory=time.perf_counter)


class Link:
    """State of one endpoint. ``sock``/``generation`` change under ``send_lock``; the rest under
    the client's lock. A generation is unique across all links of a client (one counter), so
    ``ticket.sent_generation == link.generation`` means "already sent on this connection"."""

    def __init__(self, index: int, endpoint: Endpoint) -> None:
        self.index = index
        self.endpoint = endpoint
        self.send_lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.generation = -1
        self.up = False
        self.inflight: set[int] = set()  # request ids assigned to this link
        self.pending_rows = 0
        self.replies = 0
        self.failovers = 0  # times this link died with requests moved elsewhere
        self.failures = 0  # failed connection attempts since it last answered (the backoff)
        self.outage_since: float | None = None  # went down at (time.monotonic()); None: fine
        self.ping: tuple[Future, float] | None = None  # outstanding health check, sent at
        self.thread: threading.Thread | None = None

    def describe(self) -> dict[str, object]:
        """A small JSON-able summary (for logs and ``yz infer-info``-style output)."""
        return {
            "endpoint": str(self.endpoint),
            "up": self.up,
            "pending_rows": self.pending_rows,
            "replies": self.replies,
            "failovers": self.failovers,
        }

    def send(self, ticket: Ticket) -> bool:
        """Send ``ticket`` on this link unless it already went out on this connection.

        Call with ``send_lock`` held. Returns False (and shuts the socket down, so that the
        reader notices and fails over) when the socket is broken.
        """
        sock = self.sock
        if sock is None or ticket.link != self.index or ticket.sent_generation == self.generation:
            return True
        ticket.sent_generation = self.generation
        try:
            sock.sendall(ticket.frame)
        except OSError:
            shutdown_socket(sock, close=False)
            return False
        return True


def recv_exact(sock: socket.socket, size: int) -> bytearray:
    """Exactly ``size`` bytes; raises EOFError when the peer closes."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("server closed the connection")
        got += n
    return buffer


def recv_frame(sock: socket.socket) -> bytearray:
    """One length-prefixed frame (without its prefix)."""
    (length,) = LENGTH.unpack(recv_exact(sock, LENGTH.size))
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(Status.FRAME_TOO_LARGE, f"reply frame of {length} bytes")
    return recv_exact(sock, length)


def shutdown_socket(sock: socket.socket | None, close: bool = True) -> None:
    """Shut both directions (unblocks a thread stuck in send/recv) and optionally close."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    if close:
        sock.close()
