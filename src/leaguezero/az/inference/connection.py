"""One client connection of the inference server, with what flow control needs to know.

The server stops reading from a connection while ``pending`` or ``unsent_bytes`` is over its
bound (``ServerSettings.max_pending_per_connection`` / ``max_unsent_bytes``); ``room`` wakes the
reader when an answer frees a slot.
"""

from __future__ import annotations

import asyncio


class Connection:
    """One client's stream and what it holds of the server: unanswered requests (``pending``)
    and reply bytes it has not read (``unsent_bytes``). Replies to a closed connection are
    dropped."""

    def __init__(self, writer: asyncio.StreamWriter, is_unix: bool) -> None:
        self.writer = writer
        self.is_unix = is_unix  # owner-only socket: the admin token is optional
        self.closed = False
        self.pending = 0  # eval requests read but not answered yet
        self.room = asyncio.Event()  # set when an answer frees room for one more request

    def send(self, frame: bytes) -> None:
        if not self.closed:
            self.writer.write(frame)  # buffered; never await drain here (it would stall others)

    def answered(self) -> None:
        self.pending -= 1
        self.room.set()

    def unsent_bytes(self) -> int:
        transport = self.writer.transport
        return 0 if transport.is_closing() else transport.get_write_buffer_size()
