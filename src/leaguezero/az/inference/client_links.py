"""The connections of an :class:`~leaguezero.az.inference.client.InferenceClient`: which server
a request goes to, the reader thread per server, and what happens when one goes away
(:class:`ClientLinks`, the client's base class).

Several servers (``tcp://h1:p,tcp://h2:p``, one per GPU): each request goes to the live server
with the fewest pending rows. When a server dies (connection lost, or no answer to a health
check within ``health_timeout_s``), its unanswered requests are resent to the live ones, and its
reader keeps reconnecting with exponential backoff (20 ms doubling to 2 s, jittered; reset once
the server answers a request), logging the outage once (one warning when it goes down, one
info line when it answers again); a recovered server gets the models loaded through
:meth:`~leaguezero.az.inference.client.InferenceClient.load_model` again, then takes traffic.
A reply is matched by ``request_id``, so nothing is lost and a duplicate reply is ignored.

Each connection starts with a hello (an INFO request, answered before the connection takes
traffic): the server closes connections that say nothing, and one that refuses this client
(``BUSY``: it holds its most connections) counts as a failed attempt, so the client backs off
instead of cycling through connect, send, refused.

Backpressure: at most ``max_pending_total`` rows are in flight; ``submit`` blocks until replies
free room (a single batch larger than the cap is still sent once nothing else is pending).
While no server is up, requests wait; after ``reconnect_timeout_s`` with none, the waiting
requests fail with ``ConnectionError`` and so does every later call.
"""

from __future__ import annotations

import itertools
import logging
import random
import socket
import threading
import time
from concurrent.futures import Future

from leaguezero.az.inference.admin import load_signed
from leaguezero.az.inference.client_stats import ClientStats
from leaguezero.az.inference.endpoint import Endpoint, UntrustedSocketError, connect
from leaguezero.az.inference.links import Link, Ticket, recv_frame, shutdown_socket
from leaguezero.az.inference.protocol import (
    ControlOp,
    InferenceError,
    ProtocolError,
    Reply,
    decode_reply,
    encode_control_request,
)

log = logging.getLogger("leaguezero.az.inference.client")  # the client's log, as before

BACKOFF_FIRST_S = 0.02  # first wait after a failed connection attempt...
BACKOFF_MAX_S = 2.0  # ...doubling up to this (times a jitter of 0.5-1)
HELLO_TIMEOUT_S = 30.0  # a server that accepted must answer the hello within this


class ClientLinks:
    """Sending, the link life cycle and receiving of an
    :class:`~leaguezero.az.inference.client.InferenceClient`, its base class: the client's
    ``__init__`` sets the state below and starts a :meth:`_link_loop` thread per link and the
    :meth:`_health_loop` thread."""

    links: list[Link]
    max_pending_total: int
    reconnect_timeout_s: float
    health_interval_s: float | None
    health_timeout_s: float
    stats: ClientStats
    _lock: threading.Lock  # guards tickets, link accounting, _failure, stats
    _room: threading.Condition  # on _lock: backpressure and "a server is up"
    _pending: dict[int, Ticket]
    _pending_rows: int
    _ids: itertools.count
    _generations: itertools.count
    _models: dict[int, tuple[str, str | None]]  # replayed on reconnect
    _closed: bool
    _stopping: threading.Event
    _failure: BaseException | None
    _all_down_since: float
    _ever_up: bool

    def _least_loaded(self) -> Link | None:
        """The live link with the fewest pending rows (lowest index on ties); lock held."""
        live = [link for link in self.links if link.up]
        return min(live, key=lambda link: link.pending_rows) if live else None

    def _assign(self, rid: int, ticket: Ticket, link: Link | None) -> None:
        ticket.link = None if link is None else link.index
        if link is not None:
            link.inflight.add(rid)
            link.pending_rows += ticket.rows

    def _submit_frame(self, rid: int, ticket: Ticket, link: Link | None = None) -> Future:
        """Register ``ticket`` and send it (to ``link`` when pinned, else the least loaded)."""
        with self._room:
            while (  # control requests (0 rows) never wait: health checks must get through
                self._failure is None
                and ticket.rows > 0
                and self._pending_rows > 0
                and self._pending_rows + ticket.rows > self.max_pending_total
            ):
                self._room.wait()
            if self._failure is not None:
                raise ConnectionError(str(self._failure))
            if ticket.pinned and (link is None or not link.up):
                ticket.future.set_exception(ConnectionError("inference server is down"))
                return ticket.future
            self._pending[rid] = ticket
            self._pending_rows += ticket.rows
            target = link if ticket.pinned else self._least_loaded()
            self._assign(rid, ticket, target)  # None: parked until a server comes up
        if target is not None:
            with target.send_lock:
                target.send(ticket)
        return ticket.future

    def _control(self, link: Link, op: ControlOp, model_id: int, argument: str) -> Future:
        rid = next(self._ids)
        frame = encode_control_request(rid, op, model_id, argument)
        return self._submit_frame(rid, Ticket(Future(), frame, 0, pinned=True), link)

    def _send_assigned(self, links: set[int]) -> None:
        """Send every ticket assigned to these links that has not gone out on them yet."""
        for index in sorted(links):
            link = self.links[index]
            with self._lock:
                tickets = sorted((r, self._pending[r]) for r in link.inflight if r in self._pending)
            with link.send_lock:
                for _, ticket in tickets:
                    if not link.send(ticket):
                        break  # its reader sees the broken socket and fails over again

    # ---------------------------------------------------------------- link life cycle
    def _link_loop(self, link: Link) -> None:
        """Per endpoint: connect (with backoff), serve replies, fail over, repeat."""
        connected_before = False
        while True:
            sock = self._connect(link)
            if sock is None:
                return  # closed, or failed for good
            self._bring_up(link, sock, reconnect=connected_before)
            connected_before = True
            try:
                while True:
                    self._complete(link, decode_reply(recv_frame(sock)))
            except (OSError, EOFError, ProtocolError) as err:
                if self._closed:
                    return
                reason = str(err) or type(err).__name__
            self._take_down(link, sock, reason)

    def _connect(self, link: Link) -> socket.socket | None:
        """A connection to ``link`` that answered the hello and loaded this client's models;
        retried with exponential backoff (``link.failures`` carries over between outages
        until the server answers a request). None: closed, or failed for good."""
        while not self._closed and self._failure is None:
            try:
                sock = connect(link.endpoint)
                self._hello(sock)
                self._replay_models(link.endpoint, sock)
                return sock
            except UntrustedSocketError as err:  # retrying cannot help: say so at once
                self._fail_all(err)
                return None
            except (OSError, EOFError, ProtocolError, InferenceError) as err:
                with self._lock:
                    down_for = time.monotonic() - self._all_down_since
                    all_down = not any(other.up for other in self.links)
                if all_down and self._ever_up and down_for > self.reconnect_timeout_s:
                    self._fail_all(ConnectionError(
                        f"no inference server at {link.endpoint} after "
                        f"{self.reconnect_timeout_s:.0f} s ({err}); start one with "
                        "`yz infer-server`"
                    ))  # fmt: skip
                    return None
                log.debug("connecting to %s failed: %s", link.endpoint, err)
            link.failures += 1
            delay = min(BACKOFF_FIRST_S * 2 ** (link.failures - 1), BACKOFF_MAX_S)
            self._stopping.wait(delay * random.uniform(0.5, 1.0))  # close() cuts it short
        return None

    def _hello(self, sock: socket.socket) -> None:
        """Ask INFO on a fresh connection (the server closes connections that say nothing).
        Any answer to it will do (a server of another protocol version answers with an error,
        which every request then gets as before); an error the server volunteers (request id
        0: BUSY, its most connections) or no answer raises, so the attempt counts as failed."""
        sock.settimeout(HELLO_TIMEOUT_S)
        try:
            rid = next(self._ids)
            sock.sendall(encode_control_request(rid, ControlOp.INFO, 0, ""))
            while True:
                reply = decode_reply(recv_frame(sock))
                if reply.request_id == rid:
                    break
                if reply.request_id == 0 and not reply.ok:
                    raise InferenceError(reply.status, reply.message)
        except BaseException:
            shutdown_socket(sock)
            raise
        sock.settimeout(None)

    def _replay_models(self, endpoint: Endpoint, sock: socket.socket) -> None:
        """Load this client's models on a fresh connection before it takes traffic.

        A restarted server may serve something else; routing search traffic to it before it
        serves the run's model would silently mix two nets. Raises on a refused load (the
        connection is then retried later).
        """
        with self._lock:
            models = sorted(self._models.items())
        sock.settimeout(120.0)

        def call(op: ControlOp, model_id: int, argument: str) -> Reply:
            reply = self._call_on(sock, op, model_id, argument)
            if not reply.ok:
                raise InferenceError(reply.status, reply.message)
            return reply

        try:
            for model_id, (path, token) in models:
                load_signed(call, endpoint, model_id, path, token)
        except BaseException:
            shutdown_socket(sock)
            raise
        sock.settimeout(None)

    def _call_on(self, sock: socket.socket, op: ControlOp, model_id: int, argument: str) -> Reply:
        """Send one control request on a connection not yet in service; its reply."""
        rid = next(self._ids)
        sock.sendall(encode_control_request(rid, op, model_id, argument))
        while True:
            reply = decode_reply(recv_frame(sock))
            if reply.request_id == rid:
                return reply

    def _bring_up(self, link: Link, sock: socket.socket, reconnect: bool) -> None:
        with link.send_lock:
            link.sock = sock
            link.generation = next(self._generations)
        with self._room:
            if self._closed:
                link.sock = None
                shutdown_socket(sock)
                return
            link.up = True
            self._ever_up = True
            self._all_down_since = float("inf")
            if reconnect:
                self.stats.reconnects += 1
            parked = [(r, t) for r, t in self._pending.items() if t.link is None]
            for rid, ticket in parked:
                self._assign(rid, ticket, link)
                self.stats.resent += ticket.sent_generation >= 0
            self._room.notify_all()
        self._send_assigned({link.index})
        if reconnect or parked:
            log.info("%s is up; sent %d waiting requests", link.endpoint, len(parked))

    def _take_down(self, link: Link, sock: socket.socket, reason: str) -> None:
        """Mark ``link`` down and move its unanswered requests to live links (or park them)."""
        shutdown_socket(sock, close=False)  # unblocks a sender stuck on it; no fd is freed yet
        with link.send_lock:  # close only while no sender can be using the fd
            if link.sock is sock:
                link.sock = None
            sock.close()
        failed: list[Ticket] = []
        targets: set[int] = set()
        with self._room:
            link.up = False
            link.ping = None
            moved = sorted(link.inflight)
            link.inflight = set()
            link.pending_rows = 0
            if not any(other.up for other in self.links):
                self._all_down_since = time.monotonic()
            for rid in moved:
                ticket = self._pending.get(rid)
                if ticket is None:
                    continue
                if ticket.pinned:
                    del self._pending[rid]
                    failed.append(ticket)
                    continue
                target = self._least_loaded()
                self._assign(rid, ticket, target)
                if target is not None:
                    targets.add(target.index)
                    self.stats.resent += 1
            if moved:
                link.failovers += 1
            self._room.notify_all()
        for ticket in failed:
            ticket.future.set_exception(ConnectionError(f"{link.endpoint} went down"))
        self._send_assigned(targets)
        if link.outage_since is None:  # one line per outage, however often it reconnects
            link.outage_since = time.monotonic()
            log.warning(
                "%s is down (%s; %d requests moved); reconnecting with backoff", link.endpoint,
                reason, len(moved),
            )  # fmt: skip
        else:
            log.debug("%s is down again (%s); moved %d requests", link.endpoint, reason, len(moved))

    def _health_loop(self) -> None:
        """Ping each live server; one that leaves a ping unanswered too long is taken down."""
        assert self.health_interval_s is not None
        while not self._stopping.wait(self.health_interval_s) and self._failure is None:
            now = time.monotonic()
            for link in self.links:
                with self._lock:
                    up, ping = link.up, link.ping
                if not up:
                    continue
                if ping is not None and not ping[0].done():
                    if now - ping[1] > self.health_timeout_s:
                        log.warning("%s missed its health check; failing over", link.endpoint)
                        shutdown_socket(link.sock, close=False)  # its reader takes it down
                    continue
                try:
                    link.ping = (self._control(link, ControlOp.INFO, 0, ""), now)
                except ConnectionError:
                    return  # the client failed or closed meanwhile

    # ---------------------------------------------------------------- receiving
    def _complete(self, link: Link, reply: Reply) -> None:
        with self._room:
            ticket = self._pending.pop(reply.request_id, None)
            if ticket is None:
                return  # a duplicate after a resend, already answered
            self._pending_rows -= ticket.rows
            if ticket.link is not None:
                owner = self.links[ticket.link]
                owner.inflight.discard(reply.request_id)
                owner.pending_rows -= ticket.rows
            link.replies += 1
            link.failures = 0  # it answers: the next outage backs off from the start
            outage, link.outage_since = link.outage_since, None
            if not ticket.pinned:
                self.stats.record(ticket.rows, time.perf_counter() - ticket.submitted)
            self._room.notify_all()
        if outage is not None:
            log.info("%s answers again after %.1f s", link.endpoint, time.monotonic() - outage)
        if reply.ok:
            ticket.future.set_result(reply)
        else:
            ticket.future.set_exception(InferenceError(reply.status, reply.message))

    def _fail_all(self, err: BaseException) -> None:
        with self._room:
            self._failure = self._failure or err
            tickets = list(self._pending.values())
            self._pending.clear()
            self._pending_rows = 0
            for link in self.links:
                link.inflight = set()
                link.pending_rows = 0
            self._room.notify_all()
        for ticket in tickets:
            if not ticket.future.done():
                ticket.future.set_exception(ConnectionError(str(err)))
