"""One client connection of the inference server, with what flow control needs to know.

The server stops reading from a connection while ``pending`` or ``unsent_bytes`` is over its
bound (``ServerSettings.max_pending_per_connection`` / ``max_unsent_bytes``); ``room`` wakes the
reader when an answer frees a slot. :meth:`Connection.held_bytes` is what the connection costs
the server's memory, which the server bounds over all connections
(``ServerSettings.max_held_bytes``). ``peer`` (:func:`~leaguezero.az.inference.peers.peer_of`)
is who the server's caps and fair shares count it under; ``proven`` whether it has completed a
frame (a connection that never does is closed at the handshake deadline, and is the first to
give way when the server is full).
"""

from __future__ import annotations

import asyncio
import time


class Connection:
    """One client's stream and what it holds of the server: unanswered requests (``pending``,
    ``queued_bytes`` of their frames), the frame being read (``reading_bytes``) and reply bytes it
    has not read (``unsent_bytes``). Replies to a closed connection are dropped."""

    def __init__(self, writer: asyncio.StreamWriter, is_unix: bool, peer: str = "") -> None:
        self.writer = writer
        self.is_unix = is_unix  # owner-only socket: the admin token is optional
        self.peer = peer  # "uid:N" or "addr:HOST": the unit of caps and fair shares
        self.proven = False  # it completed a frame (before: it holds a slot and says nothing)
        self.last_frame = time.monotonic()  # when it last completed a frame (or opened)
        self.watching = False  # a task waits for its unread replies to drain (then wakes batchers)
        self.closed = False
        self.pending = 0  # eval requests read but not answered yet
        self.queued_bytes = 0  # frame bytes of the requests waiting in a batch queue
        self.reading_bytes = 0  # length of the frame being read now (0 between frames)
        self.room = asyncio.Event()  # set when an answer frees room for one more request
        self.nonce: bytes | None = None  # the admin challenge given out, until a load uses it

    def send(self, frame: bytes) -> None:
        if not self.closed:
            self.writer.write(frame)  # buffered; never await drain here (it would stall others)

    def answered(self) -> None:
        self.pending -= 1
        self.room.set()

    def over_unread(self, limit: int) -> bool:
        """Whether its unread replies pass ``limit`` bytes: it gets no compute until it reads."""
        return self.unsent_bytes() > limit

    def unsent_bytes(self) -> int:
        transport = self.writer.transport
        return 0 if transport.is_closing() else transport.get_write_buffer_size()

    def held_bytes(self) -> int:
        """Server memory this connection holds: its frame being read, its queued requests and
        the replies it has not read."""
        return self.reading_bytes + self.queued_bytes + self.unsent_bytes()
