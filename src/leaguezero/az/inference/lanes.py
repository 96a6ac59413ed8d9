"""The inference server's batch queue, fair between peers, and a rate-limited log line.

:class:`FairQueue` keeps one model's queued requests as a FIFO lane per connection, grouped by
peer (a user, or a remote address: :mod:`~leaguezero.az.inference.peers`), and forms a batch
round-robin over the peers and each peer's connections (one whole frame from each in turn), so
a client with a thousand frames queued delays another peer's request by at most one frame per
peer ahead of it, never by its whole backlog, nor by how many connections it opened.
:class:`RateLimitedLog` writes a repeated warning (a refused admin attempt, a shed connection)
at most once per interval, counting what it left out.
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


def _never(conn: Connection) -> bool:
    return False


@dataclass
class Pending:
    request: EvalRequest | PositionRequest
    conn: Connection
    arrival: float  # time.perf_counter() when the frame was read
    nbytes: int  # frame length (what the request holds of the server's memory)


@dataclass
class FairQueue:
    """One model's queued requests: a FIFO lane per connection, grouped by peer
    (:attr:`Connection.peer`), in round-robin order at both levels: a batch takes one frame from
    each peer in turn (from that peer's connections in turn), so a peer's share does not grow
    with the connections it opens.

    ``clients`` are the open connections that have asked this model something. When each of
    them has a frame queued (:meth:`all_clients_waiting`), no more rows can come before an
    answer goes out, so the batcher flushes at once instead of waiting ``max_wait_us``: a lone
    client (a search, a worker) never pays the batching window on every leaf batch, and N
    clients are still batched together once all N have sent.

    ``blocked(conn)`` (see :meth:`take_batch`) leaves a connection's frames queued without
    compute: the server passes "its unread replies pass the bound", so a client that does not
    read gets nothing more computed until it does.
    """

    peers: dict[str, dict[Connection, deque[Pending]]] = field(default_factory=dict)
    clients: set[Connection] = field(default_factory=set)
    rows: int = 0
    count: int = 0
    waiting: int = 0  # connections with a frame queued
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def all_clients_waiting(self) -> bool:
        """Whether every client of this model has a frame queued (so waiting gains nothing)."""
        return self.waiting >= len(self.clients)

    def push(self, pending: Pending) -> None:
        conn = pending.conn
        self.clients.add(conn)
        lanes = self.peers.setdefault(conn.peer, {})
        lane = lanes.get(conn)
        if lane is None:
            lane = lanes[conn] = deque()
            self.waiting += 1
        lane.append(pending)
        self.rows += pending.request.rows
        self.count += 1

    def ready(self, blocked: Callable[[Connection], bool] = _never) -> bool:
        """Whether some queued frame's connection is not ``blocked``."""
        return any(not blocked(c) for lanes in self.peers.values() for c in lanes)

    def oldest_arrival(self, blocked: Callable[[Connection], bool] = _never) -> float:
        """Arrival of the oldest frame at the head of a lane not ``blocked`` (inf: none)."""
        heads = (
            lane[0].arrival
            for lanes in self.peers.values()
            for conn, lane in lanes.items()
            if not blocked(conn)
        )
        return min(heads, default=float("inf"))

    def take_batch(
        self, max_batch: int, blocked: Callable[[Connection], bool] = _never
    ) -> tuple[list[Pending], int]:
        """Whole frames round-robin over the peers, and over each peer's connections, until
        ``max_batch`` rows (at least one frame when any connection is not ``blocked``). A
        connection whose next frame does not fit, or that is ``blocked``, keeps its place."""
        batch: list[Pending] = []
        rows = 0
        progress = True
        while progress and rows < max_batch:
            progress = False
            for peer in list(self.peers):
                lanes = self.peers[peer]
                conn = next(
                    (
                        c
                        for c, lane in lanes.items()
                        if not (batch and rows + lane[0].request.rows > max_batch)
                        and not blocked(c)
                    ),
                    None,
                )
                if conn is None:
                    continue
                lane = lanes.pop(conn)
                head = lane.popleft()
                batch.append(head)
                rows += head.request.rows
                progress = True
                if lane:
                    lanes[conn] = lane  # back of this peer's round
                else:
                    self.waiting -= 1
                del self.peers[peer]
                if lanes:
                    self.peers[peer] = lanes  # back of the round of peers
                if rows >= max_batch:
                    break
        self.rows -= rows
        self.count -= len(batch)
        return batch, rows

    def drop(self, conn: Connection) -> int:
        """Forget ``conn`` (closed): its queued requests and its place among the clients;
        returns how many requests were dropped."""
        self.clients.discard(conn)
        lanes = self.peers.get(conn.peer)
        lane = None if lanes is None else lanes.pop(conn, None)
        if lanes is not None and not lanes:
            del self.peers[conn.peer]
        if not lane:
            return 0
        self.waiting -= 1
        self.rows -= sum(p.request.rows for p in lane)
        self.count -= len(lane)
        return len(lane)
