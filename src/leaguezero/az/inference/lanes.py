"""The inference server's batch queue, fair between connections, and a rate-limited log line.

:class:`FairQueue` keeps one model's queued requests as a FIFO lane per connection and forms a
batch round-robin over the lanes (one whole frame from each connection in turn), so a client with
a thousand frames queued delays another client's request by at most one frame per connection
ahead of it, never by its whole backlog. :class:`RateLimitedLog` writes a repeated warning (a
refused admin attempt, a shed connection) at most once per interval, counting what it left out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from leaguezero.az.inference.connection import Connection
from leaguezero.az.inference.protocol import EvalRequest, PositionRequest

log = logging.getLogger("leaguezero.az.inference.server")  # the server's log, as before


class RateLimitedLog:
    """At most one log line per ``interval_s`` for a repeated event; the next line says how many
    were left out (a refused client cannot fill the log)."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._last = -float("inf")
        self._skipped = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a line went out less than ``interval_s`` ago; returns
        whether it was logged."""
        now = self.clock()
        if now - self._last < self.interval_s:
            self._skipped += 1
            return False
        if self._skipped:
            message += f" ({self._skipped} more like this in the last {now - self._last:.0f} s)"
        self._last, self._skipped = now, 0
        log.warning(message, *args)
        return True


@dataclass
class Pending:
    request: EvalRequest | PositionRequest
    conn: Connection
    arrival: float  # time.perf_counter() when the frame was read
    nbytes: int  # frame length (what the request holds of the server's memory)


@dataclass
class FairQueue:
    """One model's queued requests: a FIFO lane per connection, in round-robin order (a lane
    moves to the back when it gives a frame to a batch).

    ``clients`` are the open connections that have asked this model something. When each of
    them has a frame queued (:meth:`all_clients_waiting`), no more rows can come before an
    answer goes out, so the batcher flushes at once instead of waiting ``max_wait_us``: a lone
    client (a search, a worker) never pays the batching window on every leaf batch, and N
    clients are still batched together once all N have sent.
    """

    lanes: dict[Connection, deque[Pending]] = field(default_factory=dict)
    clients: set[Connection] = field(default_factory=set)
    rows: int = 0
    count: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def all_clients_waiting(self) -> bool:
        """Whether every client of this model has a frame queued (so waiting gains nothing)."""
        return len(self.lanes) >= len(self.clients)

    def push(self, pending: Pending) -> None:
        self.clients.add(pending.conn)
        lane = self.lanes.get(pending.conn)
        if lane is None:
            lane = self.lanes[pending.conn] = deque()
        lane.append(pending)
        self.rows += pending.request.rows
        self.count += 1

    def oldest_arrival(self) -> float:
        return min(lane[0].arrival for lane in self.lanes.values())

    def take_batch(self, max_batch: int) -> tuple[list[Pending], int]:
        """Whole frames round-robin over the connections until ``max_batch`` rows (at least one
        frame; a connection whose next frame does not fit keeps its place at the front)."""
        batch: list[Pending] = []
        rows = 0
        progress = True
        while progress and rows < max_batch:
            progress = False
            for conn in list(self.lanes):
                lane = self.lanes[conn]
                head = lane[0]
                if batch and rows + head.request.rows > max_batch:
                    continue
                lane.popleft()
                batch.append(head)
                rows += head.request.rows
                progress = True
                del self.lanes[conn]
                if lane:
                    self.lanes[conn] = lane  # back of the round
                if rows >= max_batch:
                    break
        self.rows -= rows
        self.count -= len(batch)
        return batch, rows

    def drop(self, conn: Connection) -> int:
        """Forget ``conn`` (closed): its queued requests and its place among the clients;
        returns how many requests were dropped."""
        self.clients.discard(conn)
        lane = self.lanes.pop(conn, None)
        if not lane:
            return 0
        self.rows -= sum(p.request.rows for p in lane)
        self.count -= len(lane)
        return len(lane)
