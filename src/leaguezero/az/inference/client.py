"""The inference-server client: an Evaluator over one or more servers, plus a ticket API.

``submit(features, legal)`` (or ``submit_positions(positions, ...)``, the compact kind a
game's server encodes itself) encodes one frame for the whole batch, registers a ticket under a
fresh ``request_id`` and sends it; a reader thread per server decodes replies and completes the
ticket's ``Future``, so replies may arrive in any order. ``evaluate`` is ``submit`` + wait +
masked softmax: the blocking call a lockstep search makes once per leaf batch.

Several servers (``tcp://h1:p,tcp://h2:p``, one per GPU): each request goes to the live server
with the fewest pending rows. When a server dies (connection lost, or no answer to a health
check within ``health_timeout_s``), its unanswered requests are resent to the live ones, and its
reader keeps reconnecting with exponential backoff (20 ms doubling to 2 s, jittered; reset once
the server answers a request), logging the outage once (one warning when it goes down, one
info line when it answers again); a recovered server gets the models loaded through
:meth:`InferenceClient.load_model` again, then takes traffic. A reply is matched by
``request_id``, so nothing is lost and a duplicate reply is ignored.

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
import json
import logging
import random
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from leaguezero.az.evaluator import mix_utility
from leaguezero.az.inference.admin import admin_signature, with_signature
from leaguezero.az.inference.endpoint import (
    Endpoint,
    UntrustedSocketError,
    connect,
    parse_endpoints,
)
from leaguezero.az.inference.links import Link, Ticket, recv_frame, shutdown_socket
from leaguezero.az.inference.protocol import (
    ControlOp,
    ProtocolError,
    Reply,
    Status,
    decode_reply,
    encode_control_request,
    encode_eval_request,
    encode_position_request,
)

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.02  # first wait after a failed connection attempt...
BACKOFF_MAX_S = 2.0  # ...doubling up to this (times a jitter of 0.5-1)
HELLO_TIMEOUT_S = 30.0  # a server that accepted must answer the hello within this


class InferenceError(RuntimeError):
    """The server answered a request with an error status."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"inference server error {status.name}: {message}")
        self.status = status


LATENCY_BOUNDS_S = np.array([1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0])


@dataclass
class ClientStats:
    """Counters of one client; latency is submit -> reply decoded, per request frame."""

    requests: int = 0
    rows: int = 0
    reconnects: int = 0
    resent: int = 0
    latency_sum_s: float = 0.0
    # latency_counts[i] = replies with latency <= LATENCY_BOUNDS_S[i] (and above the previous
    # bound); the last entry counts the rest.
    latency_counts: np.ndarray = field(
        default_factory=lambda: np.zeros(len(LATENCY_BOUNDS_S) + 1, np.int64)
    )

    def record(self, rows: int, latency_s: float) -> None:
        self.requests += 1
        self.rows += rows
        self.latency_sum_s += latency_s
        self.latency_counts[np.searchsorted(LATENCY_BOUNDS_S, latency_s)] += 1

    def latency_quantile_s(self, q: float) -> float:
        """Upper bound of the histogram bucket holding quantile ``q`` (inf past the last)."""
        cumulative = np.cumsum(self.latency_counts)
        if cumulative[-1] == 0:
            return float("nan")
        index = int(np.searchsorted(cumulative, q * cumulative[-1]))
        return float(LATENCY_BOUNDS_S[index]) if index < len(LATENCY_BOUNDS_S) else float("inf")


class InferenceClient:
    """Evaluator over inference servers (``unix:///path``, ``tcp://host:port``, or a
    comma-separated list of them).

    Args:
        endpoint: server address(es).
        feature_schema_id: sent with every request; the server rejects a mismatch.
        num_actions: A, for the Evaluator protocol.
        model_id: model for ``evaluate`` (``submit`` can name another one).
        max_pending_total: most rows in flight over all servers (backpressure).
        connect_timeout_s: how long the first connection to any server may take.
        reconnect_timeout_s: how long to wait with no server up before failing.
        health_interval_s: seconds between health checks of each live server (None: off).
        health_timeout_s: a server that leaves a health check unanswered this long is dead.
    """

    def __init__(
        self,
        endpoint: str | Endpoint,
        *,
        feature_schema_id: int,
        num_actions: int,
        model_id: int = 0,
        max_pending_total: int = 4096,
        connect_timeout_s: float = 30.0,
        reconnect_timeout_s: float = 60.0,
        health_interval_s: float | None = 2.0,
        health_timeout_s: float = 10.0,
    ) -> None:
        endpoints = parse_endpoints(endpoint) if isinstance(endpoint, str) else [endpoint]
        self.endpoints = endpoints
        self.endpoint = endpoints[0]
        self.feature_schema_id = feature_schema_id
        self.num_actions = num_actions
        self.model_id = model_id
        self.margin_weight = 0.0  # > 0: search utility mixes the value and margin heads
        self.max_pending_total = max_pending_total
        self.reconnect_timeout_s = reconnect_timeout_s
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.stats = ClientStats()
        self._lock = threading.Lock()  # guards tickets, link accounting, _failure, stats
        self._room = threading.Condition(self._lock)
        self._pending: dict[int, Ticket] = {}
        self._pending_rows = 0
        self._ids = itertools.count(1)
        self._admin_lock = threading.Lock()  # one challenge-response at a time per connection
        self._generations = itertools.count(1)
        # Loaded through this client, with their admin tokens; replayed on reconnect.
        self._models: dict[int, tuple[str, str | None]] = {}
        self._closed = False
        self._stopping = threading.Event()  # wakes the health thread at close
        self._failure: BaseException | None = None
        self._all_down_since = time.monotonic()
        self._ever_up = False
        self.links = [Link(i, e) for i, e in enumerate(endpoints)]
        for link in self.links:
            link.thread = threading.Thread(
                target=self._link_loop, args=(link,), name=f"lz-infer-{link.index}", daemon=True
            )
            link.thread.start()
        with self._room:
            self._room.wait_for(
                lambda: self._ever_up or self._failure is not None, timeout=connect_timeout_s
            )
            ok = self._ever_up
        if not ok:
            self.close()
            if isinstance(self._failure, UntrustedSocketError):
                raise UntrustedSocketError(str(self._failure))
            where = ", ".join(str(e) for e in endpoints)
            raise ConnectionError(
                f"no inference server at {where} after {connect_timeout_s:.0f} s; "
                "start one with `yz infer-server`"
            )
        self._health: threading.Thread | None = None
        if health_interval_s is not None:
            self._health = threading.Thread(target=self._health_loop, name="lz-infer-health")
            self._health.daemon = True
            self._health.start()

    # ---------------------------------------------------------------- public API
    def submit(
        self, features: np.ndarray, legal: np.ndarray, model_id: int | None = None
    ) -> Future:
        """Send ``features`` float32 [N, F] with ``legal`` bool [N, A]; returns a Future of Reply.

        The Future's result has ``logits`` [N, A] (illegal actions are ``-inf``), ``values`` [N]
        and ``margins`` [N] or None; an error status raises :class:`InferenceError` from it.
        Blocks while more than ``max_pending_total`` rows are in flight.
        """
        mid = self.model_id if model_id is None else model_id
        rid = next(self._ids)
        frame = encode_eval_request(rid, mid, self.feature_schema_id, features, legal)
        return self._submit_frame(rid, Ticket(Future(), frame, features.shape[0]))

    def submit_positions(
        self,
        positions: np.ndarray,
        position_schema_id: int,
        model_id: int | None = None,
        with_logits: bool = False,
    ) -> Future:
        """Send ``positions`` int [N, W] (the game's compact rows, protocol kind 4); returns a
        Future of a Reply with ``values`` [N] and ``margins`` [N] or None, and with
        ``with_logits`` also ``logits`` [N, A] (actions the server's codec finds illegal at a
        row are ``-inf``)."""
        mid = self.model_id if model_id is None else model_id
        rid = next(self._ids)
        actions = self.num_actions if with_logits else 0
        frame = encode_position_request(
            rid, mid, self.feature_schema_id, position_schema_id, positions, actions
        )
        return self._submit_frame(rid, Ticket(Future(), frame, positions.shape[0]))

    def evaluate_position_values(
        self, positions: np.ndarray, position_schema_id: int, chunk_rows: int = 8192
    ) -> np.ndarray:
        """PositionValueEvaluator: the search utility float32 [N] of ``positions`` int [N, W],
        which the server encodes (and deduplicates boards of) itself; sent in chunks of
        ``chunk_rows`` rows as backpressure allows, all in flight at once."""
        pending = [
            self.submit_positions(positions[i : i + chunk_rows], position_schema_id)
            for i in range(0, len(positions), chunk_rows)
        ]
        return self._gather_values(pending)

    def evaluate_positions_async(
        self, positions: np.ndarray, position_schema_id: int, model_id: int | None = None
    ) -> PendingEvaluation:
        """PositionEvaluator: send ``positions`` int [N, W] for priors and values and return at
        once; ``.result()`` gives what :meth:`evaluate` gives for the same positions' features
        and legal actions, which the server computes from the rows (a PUCT search's leaves:
        36 bytes a row instead of 382). Encoded (copied) before this returns."""
        future = self.submit_positions(positions, position_schema_id, model_id, with_logits=True)
        return PendingEvaluation(future, self.margin_weight)

    def _gather_values(self, pending: list[Future]) -> np.ndarray:
        replies = [p.result() for p in pending]
        if len(replies) == 1:
            values, margins = replies[0].values, replies[0].margins
        else:
            values = np.concatenate([r.values for r in replies])
            with_margins = all(r.margins is not None for r in replies)
            margins = np.concatenate([r.margins for r in replies]) if with_margins else None
        return mix_utility(values, margins, self.margin_weight)

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluator protocol: priors float32 [N, A] (masked softmax) and values float32 [N]."""
        return self.evaluate_model(self.model_id, features, legal)

    def evaluate_values(self, features: np.ndarray, chunk_rows: int = 8192) -> np.ndarray:
        """ValueEvaluator: the search utility float32 [N] of ``features`` [N, F], asked as
        values-only requests (A = 0: the server skips the policy head and sends no logits), in
        chunks of ``chunk_rows`` sent as backpressure (``max_pending_total``) allows.

        Chunks are large because the server's value path works per request: fewer, larger
        forwards keep more duplicate boards in one call and pay the per-frame costs less often
        (``python benchmarks/turn_search.py --chunk-rows 8192 1024`` compares them)."""
        pending = [
            self.submit(chunk, np.zeros((len(chunk), 0), np.bool_))
            for chunk in (features[i : i + chunk_rows] for i in range(0, len(features), chunk_rows))
        ]
        return self._gather_values(pending)

    def evaluate_model(
        self, model_id: int, features: np.ndarray, legal: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`evaluate` for a given ``model_id`` (e.g. best vs candidate in gating)."""
        return self.evaluate_async(features, legal, model_id).result()

    def evaluate_async(
        self, features: np.ndarray, legal: np.ndarray, model_id: int | None = None
    ) -> PendingEvaluation:
        """Send the batch and return at once; ``.result()`` gives what :meth:`evaluate` gives.

        The request is encoded (copied) before this returns, so the caller may overwrite
        ``features`` and ``legal`` while the server works: the lockstep search uses this to
        select one group of games while another group's leaves are being evaluated.
        """
        return PendingEvaluation(self.submit(features, legal, model_id), self.margin_weight)

    def for_model(self, model_id: int) -> ModelEvaluator:
        """An Evaluator view of this client that asks ``model_id`` (shares the connections)."""
        return ModelEvaluator(self, model_id)

    def load_model(
        self, model_id: int, path: str, admin_token: str | None = None, timeout_s: float = 120.0
    ) -> dict:
        """Make every server load checkpoint ``path`` (a server-side path) as ``model_id``.

        ``admin_token`` (the server's, see :mod:`~.admin`) never crosses the wire: the client
        asks the server for a challenge and signs it with the token, over TCP, and over a Unix
        socket (served by this user: the connection checked) only when the server refuses the
        load without it. A server that is down now, or restarts later, loads it when it
        (re)connects. Returns the first server's answer; raises :class:`InferenceError` if any
        live server refuses (``UNSUPPORTED_VERSION`` from a server of another protocol).
        """
        with self._lock:
            # Recorded first, so that a server reconnecting meanwhile replays it as well.
            previous = self._models.get(model_id)
            self._models[model_id] = (path, admin_token)
            live = [link for link in self.links if link.up]
        answers = []
        try:
            for link in live:

                def call(op: ControlOp, mid: int, argument: str, link: Link = link) -> Reply:
                    return self._control(link, op, mid, argument).result(timeout_s)

                try:
                    with self._admin_lock:
                        reply = _load_with(call, link.endpoint, model_id, path, admin_token)
                    answers.append(json.loads(reply.message))
                except ConnectionError:
                    continue  # died meanwhile: it reloads on reconnect
        except InferenceError:
            with self._lock:  # a path the server refuses must not block later reconnects
                if previous is None:
                    self._models.pop(model_id, None)
                else:
                    self._models[model_id] = previous
            raise
        if not answers:
            raise ConnectionError("no inference server answered the model load")
        return answers[0]

    def info(self, timeout_s: float = 30.0) -> dict:
        """The served models as the least busy live server describes them (JSON)."""
        with self._lock:
            link = self._least_loaded()
        if link is None:
            raise ConnectionError("no inference server is up")
        return json.loads(self._control(link, ControlOp.INFO, 0, "").result(timeout_s).message)

    def endpoint_status(self) -> list[dict[str, object]]:
        """Per endpoint: address, up, pending rows, replies, failovers."""
        with self._lock:
            return [link.describe() for link in self.links]

    def close(self) -> None:
        """Fail waiting tickets, close the sockets and stop the threads."""
        self._closed = True
        self._stopping.set()
        with self._room:
            self._room.notify_all()
        for link in self.links:
            shutdown_socket(link.sock, close=False)  # unblocks a sender so the lock frees
            with link.send_lock:
                sock, link.sock = link.sock, None
                shutdown_socket(sock)
        self._fail_all(ConnectionError("inference client closed"))
        for link in self.links:
            if link.thread is not None and link.thread is not threading.current_thread():
                link.thread.join(timeout=5)

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending_rows(self) -> int:
        return self._pending_rows

    # ---------------------------------------------------------------- sending
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
                _load_with(call, endpoint, model_id, path, token)
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


def _load_with(call, endpoint: Endpoint, model_id: int, path: str, token: str | None) -> Reply:
    """Load ``path`` as ``model_id`` through ``call(op, model_id, argument) -> Reply`` (which
    raises :class:`InferenceError` on an error status): signed at once over TCP; over a Unix
    socket unsigned first, signed only when the server refuses that and a token is at hand."""

    def signed() -> Reply:
        challenge = call(ControlOp.CHALLENGE, 0, "")
        try:
            nonce = bytes.fromhex(json.loads(challenge.message)["nonce"])
        except (ValueError, KeyError, TypeError):
            raise InferenceError(
                Status.MALFORMED, "the server's admin challenge is not valid; nothing was signed"
            ) from None
        signature = admin_signature(token, nonce, model_id, path)
        return call(ControlOp.LOAD_MODEL, model_id, with_signature(path, signature))

    if endpoint.scheme == "tcp" and token is not None:
        return signed()
    try:
        return call(ControlOp.LOAD_MODEL, model_id, path)
    except InferenceError as err:
        if not _retry_with_token(err.status, endpoint, token):
            raise
        return signed()


def _retry_with_token(status: Status, endpoint: Endpoint, token: str | None) -> bool:
    """Whether a refused load over a Unix socket is sent again, now signed with the token."""
    return status == Status.UNAUTHORIZED and endpoint.scheme == "unix" and token is not None


def softmax_masked_logits(logits: np.ndarray) -> np.ndarray:
    """Row softmax of server logits [N, A] whose illegal entries are already ``-inf``.

    float32 and ~10x faster than the generic float64 ``masked_softmax`` (it runs once per leaf
    batch on the search thread); rows with no legal action give all-zero priors.
    """
    row_max = logits.max(axis=1, keepdims=True)  # [N, 1]; -inf for all-illegal rows
    row_max[~np.isfinite(row_max)] = 0.0
    e = np.exp(logits - row_max)  # exp(-inf) = 0 for illegal actions
    total = e.sum(axis=1, keepdims=True)
    total[total == 0] = 1.0
    e /= total
    return e


class PendingEvaluation:
    """An evaluation in flight: :meth:`result` blocks for ``(priors [N, A], values [N])``."""

    def __init__(self, future: Future, margin_weight: float) -> None:
        self.future = future
        self.margin_weight = margin_weight

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        reply: Reply = self.future.result()
        values = mix_utility(reply.values, reply.margins, self.margin_weight)
        return softmax_masked_logits(reply.logits), values.copy()


class ModelEvaluator:
    """The Evaluator protocol for one ``model_id`` of a shared :class:`InferenceClient`."""

    def __init__(self, client: InferenceClient, model_id: int) -> None:
        self.client = client
        self.model_id = model_id
        self.feature_schema_id = client.feature_schema_id
        self.num_actions = client.num_actions

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.client.evaluate_model(self.model_id, features, legal)

    def evaluate_async(self, features: np.ndarray, legal: np.ndarray) -> PendingEvaluation:
        return self.client.evaluate_async(features, legal, self.model_id)

    def evaluate_positions_async(
        self, positions: np.ndarray, position_schema_id: int
    ) -> PendingEvaluation:
        return self.client.evaluate_positions_async(positions, position_schema_id, self.model_id)


__all__ = [
    "LATENCY_BOUNDS_S",
    "ClientStats",
    "InferenceClient",
    "InferenceError",
    "ModelEvaluator",
    "PendingEvaluation",
    "softmax_masked_logits",
]
