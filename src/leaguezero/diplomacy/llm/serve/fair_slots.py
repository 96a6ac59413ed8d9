"""A fixed number of slots shared fairly between clients (``llm serve``'s compile workers).

One shared queue lets a client with many slow jobs delay everyone: two hostile connections held
back every new expression of the league's games from 0.03-0.13 s to 17.6-17.9 s (issue 54 item
5). Here each client has its own queue, bounded (``per_client`` jobs waiting or running; one
more is refused at once: :class:`ClientOverLimit`, so others are unaffected), and a freed slot
goes to the waiting client that runs the fewest jobs, the least recently served among equals:
a client with nothing running is served next, before any backlog of the others. And it need not
wait for a slot to come free: ``spare`` slots beyond ``slots`` go only to clients with nothing
running, so one client holding every slot (a hostile user's endless slow expressions) delays
another's first job not at all (until ``spare`` other such clients hold the spares too).

A client is whatever key the caller gives (``llm serve``: the peer's uid on loopback, its
address otherwise, :func:`~.server_http.peer_identity`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class ClientOverLimit(RuntimeError):
    """The client already has ``per_client`` jobs waiting or running (a 429)."""


class SlotWaitOver(RuntimeError):
    """No slot came free within the wait; ``why`` says what ended the wait."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Ticket:
    __slots__ = ("client", "granted")

    def __init__(self, client: str) -> None:
        self.client = client
        self.granted = False


class FairSlots:
    """``slots`` slots and ``spare`` more for clients with nothing running; :meth:`acquire`
    waits for one in its client's turn, :meth:`release` gives it back. Thread-safe."""

    def __init__(self, slots: int, per_client: int, spare: int = 0) -> None:
        if slots < 1 or per_client < 1 or spare < 0:
            raise ValueError(
                f"slots and per_client must be >= 1 and spare >= 0, got {slots}, {per_client}, "
                f"{spare}"
            )
        self.slots, self.per_client, self.spare = slots, per_client, spare
        self._cond = threading.Condition()
        self._in_use = 0
        self._waiting: dict[str, deque[_Ticket]] = {}
        self._running: dict[str, int] = {}
        self._last_served: dict[str, int] = {}  # client -> grant number (ties: oldest first)
        self._grants = 0
        self._spare_grants = 0
        self.grant_log: deque[str] = deque(maxlen=256)  # clients in grant order (tests, stats)

    def _dispatch(self) -> None:
        """Hand free slots to waiting clients, fewest running first (call with the lock)."""
        while self._waiting and self._in_use < self.slots + self.spare:
            client = min(
                self._waiting,
                key=lambda c: (self._running.get(c, 0), self._last_served.get(c, -1)),
            )
            if self._in_use >= self.slots:
                if self._running.get(client, 0):
                    break  # the spares are for clients with nothing running
                self._spare_grants += 1
            queue = self._waiting[client]
            ticket = queue.popleft()
            if not queue:
                del self._waiting[client]
            ticket.granted = True
            self._in_use += 1
            self._running[client] = self._running.get(client, 0) + 1
            self._last_served[client] = self._grants
            self._grants += 1
            self.grant_log.append(client)
            if len(self._last_served) > 4 * self.slots + 1024:  # forget long-gone clients
                for gone in [c for c in self._last_served if not self._running.get(c)][:1024]:
                    del self._last_served[gone]
        self._cond.notify_all()

    def acquire(self, client: str, deadline: float, stop: Callable[[], str]) -> None:
        """Wait for a slot in ``client``'s turn until ``deadline`` (``time.monotonic``).

        ``stop()`` is polled while waiting; a non-empty answer ends the wait with that reason.
        Raises :class:`ClientOverLimit` at once when the client is at its bound and
        :class:`SlotWaitOver` when the wait ends without a slot.
        """
        with self._cond:
            queue = self._waiting.get(client, ())
            if self._running.get(client, 0) + len(queue) >= self.per_client:
                raise ClientOverLimit(
                    f"this client already has {self.per_client} expressions compiling or "
                    "waiting to; retry when one is done"
                )
            ticket = _Ticket(client)
            self._waiting.setdefault(client, deque()).append(ticket)
            self._dispatch()
            while not ticket.granted:
                why = stop() or ("" if time.monotonic() < deadline else "waited too long")
                if why:
                    self._waiting[client].remove(ticket)
                    if not self._waiting[client]:
                        del self._waiting[client]
                    raise SlotWaitOver(why)
                self._cond.wait(0.1)

    def release(self, client: str) -> None:
        """Give back a slot ``client`` acquired."""
        with self._cond:
            left = self._running[client] - 1
            if left:
                self._running[client] = left
            else:
                del self._running[client]
            self._in_use -= 1
            self._dispatch()

    def stats(self) -> dict[str, int]:
        """Jobs granted so far (on a spare slot too), running and waiting, and clients with
        any (``/stats``)."""
        with self._cond:
            return {
                "granted": self._grants,
                "granted_spare": self._spare_grants,
                "running": sum(self._running.values()),
                "waiting": sum(len(q) for q in self._waiting.values()),
                "clients": len(set(self._running) | set(self._waiting)),
            }
