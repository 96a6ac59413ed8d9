"""The batched, multi-model inference server (asyncio; protocol v2 in docs/reference/protocol.md).

One event loop does all socket IO. Each served ``model_id`` has a queue of request frames and
a batcher task (:mod:`~leaguezero.az.inference.server_batching`: when a batch flushes, how it
is formed round-robin over the connections, where its forward pass runs); what the server
serves and its limits are :mod:`~leaguezero.az.inference.server_settings`.

Models are hot-swapped with a ``LOAD_MODEL`` control frame (or all reloaded from their paths on
SIGHUP, see :func:`serve_forever`): the load runs on the executor thread (between batches when
forward passes run there too), and the next batch uses the new weights. ``LOAD_MODEL`` is an
admin operation: over TCP it needs a signature under the server's admin token of a nonce the
connection asked for just before (challenge-response, :mod:`leaguezero.az.inference.admin`;
the token never crosses the wire); a failed load is answered with one fixed message, so a
client learns nothing about the server's file system (the log has details).

Position requests (kind 4) carry a game's compact position rows; the served model's
:class:`~leaguezero.az.inference.positions.PositionCodec` checks their ranges on the loop and
encodes them with the forward pass, just before the value path, which then sees the boards it
deduplicates. Every eval request is refused (``OVER_BUDGET``) when its forward pass would take
more than ``max_forward_bytes`` (rows times the model's estimated bytes per row), and a batch
never holds more rows than that budget allows, so one request cannot make the forward pass
exceed it.

Errors (malformed frame, unknown model, schema or shape mismatch, non-finite features) get an
error reply and the connection stays open; only an over-long length prefix, after which the
stream cannot be resynchronised, closes that one connection.

One connection may hold at most ``max_pending_per_connection`` unanswered requests and
``max_unsent_bytes`` of replies it has not read; past either bound the server stops reading
from it (the client's sends block) until it catches up, and past the second it also computes
nothing more for it (its queued frames wait) until it reads. When a connection closes, its
queued requests and unsent replies are dropped at once.

Connections are counted per *peer* (a user, or a remote address:
:mod:`~leaguezero.az.inference.peers`): at most ``max_connections_per_peer`` of one peer and
``max_connections`` in all. A connection that has not completed a frame within
``handshake_timeout_s`` is closed (clients send an INFO request first), and a connection that
has said nothing yet is the first to give way to a newcomer when either cap is reached; past
the global cap the peer with the most connections gives way to one with fewer. So silent
connections, from however many addresses, never lock a client out. Batches are fair between
peers too (:class:`~leaguezero.az.inference.lanes.FairQueue`).

Over all connections, the frames being read, the queued requests and the unread replies hold
at most ``max_held_bytes``: past it the server closes the connection that holds the most (as
Redis closes a client over its output-buffer limit); the client library reconnects and sends
its unanswered requests again, so only a client that does not read its replies loses anything.
The server's request and reply memory is therefore at most ``max_held_bytes`` plus one frame
(``max_frame_bytes``) plus the replies of one batch, and its forward-pass memory at most
``max_forward_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from leaguezero.az.inference.admin import admin_refusal, new_nonce, split_signature
from leaguezero.az.inference.admission import refuse_budget, refuse_features, refuse_positions
from leaguezero.az.inference.connection import Connection
from leaguezero.az.inference.endpoint import Endpoint, bind_unix_owner_only
from leaguezero.az.inference.lanes import FairQueue, Pending, RateLimitedLog
from leaguezero.az.inference.metrics import ServerMetrics
from leaguezero.az.inference.peers import PeerTable, peer_of
from leaguezero.az.inference.protocol import (
    LENGTH,
    PROTOCOL_VERSION,
    ControlOp,
    ControlRequest,
    PositionRequest,
    ProtocolError,
    Status,
    decode_request,
    encode_error,
)
from leaguezero.az.inference.replies import text_reply
from leaguezero.az.inference.server_batching import BatchingExecutor
from leaguezero.az.inference.server_settings import (
    ModelLoader,
    ServedModel,
    ServerError,
    ServerSettings,
)

# The server's public API: its settings and served-model record live in server_settings.py.
__all__ = [
    "InferenceServer",
    "ModelLoader",
    "ServedModel",
    "ServerError",
    "ServerSettings",
    "serve_forever",
]

log = logging.getLogger(__name__)


class InferenceServer(BatchingExecutor):
    """Serve ``models`` ({model_id: ServedModel}) on one endpoint; see module docstring."""

    def __init__(
        self,
        models: dict[int, ServedModel],
        settings: ServerSettings | None = None,
        loader: ModelLoader | None = None,
    ) -> None:
        self.models = dict(models)
        self.settings = settings or ServerSettings()
        self.loader = loader
        self.metrics = ServerMetrics()
        self.device = torch.device(self.settings.device)
        for served in self.models.values():
            served.model.to(self.device).eval()
        # Loads (and forward passes unless they run on the loop) go to this one thread.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lz-forward")
        self._forward_on_loop = self.settings.forward_on_loop()
        self._queues: dict[int, FairQueue] = {}
        self._tasks: list[asyncio.Task] = []  # one batcher per model_id
        self._control_tasks: set[asyncio.Task] = set()
        self._connections: set[Connection] = set()
        self._peers = PeerTable(
            self.settings.max_connections, self.settings.max_connections_per_peer
        )
        self._server: asyncio.base_events.Server | None = None
        self._unix_inode: tuple[str, int] | None = None
        self.address = ""
        self._refusals = RateLimitedLog()  # refused admin operations
        self._sheds = RateLimitedLog()  # connections closed for memory or refused as too many
        self._silent = RateLimitedLog()  # connections closed for saying nothing

    # ---------------------------------------------------------------- lifecycle
    async def start(self, endpoint: Endpoint) -> str:
        """Bind and start serving; returns the bound address (with the real port for ``:0``)."""
        if endpoint.scheme == "unix":
            sock = bind_unix_owner_only(endpoint.path)
            self._unix_inode = (endpoint.path, os.stat(endpoint.path).st_ino)
            self._server = await asyncio.start_unix_server(self._handle, sock=sock)
            self.address = str(endpoint)
        else:
            if not endpoint.is_loopback and not self.settings.public:
                raise ServerError(
                    f"{endpoint} can be reached from other machines; bind 127.0.0.1 or pass "
                    "--public to allow it"
                )
            self._server = await asyncio.start_server(
                self._handle, endpoint.host, endpoint.port, reuse_address=True
            )
            port = self._server.sockets[0].getsockname()[1]
            self.address = str(Endpoint("tcp", host=endpoint.host, port=port))
        for model_id in self.models:
            self._ensure_queue(model_id)
        return self.address

    async def close(self) -> None:
        """Stop accepting, drop connections, stop batchers and the executor, remove the socket."""
        if self._server is not None:
            self._server.close()
        tasks = [*self._tasks, *self._control_tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in list(self._connections):
            conn.closed = True
            conn.writer.close()
        if self._server is not None:
            await self._server.wait_closed()
        self._executor.shutdown(wait=True)
        self.metrics.close()
        if self._unix_inode is not None:
            path, inode = self._unix_inode
            try:  # remove the socket file only if it is still ours (not a newer server's)
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass

    async def reload_all(self) -> None:
        """Reload every model from its source path (SIGHUP); failures keep the old model."""
        for model_id, served in list(self.models.items()):
            await self._load(model_id, served.source)

    # ---------------------------------------------------------------- connections
    def peer_stats(self) -> dict[str, int]:
        """Open connections per peer (``uid:N`` or ``addr:HOST``)."""
        return self._peers.peers()

    def connection_stats(self) -> list[dict[str, int]]:
        """Per open connection: unanswered requests, reply bytes not yet read by the client, and
        all the bytes it holds (:meth:`Connection.held_bytes`)."""
        return [
            {"pending": c.pending, "unsent_bytes": c.unsent_bytes(), "held_bytes": c.held_bytes()}
            for c in self._connections
        ]

    def held_bytes(self) -> int:
        """Bytes of frames being read, queued requests and unread replies, all connections."""
        return sum(c.held_bytes() for c in self._connections)

    def queued_requests(self) -> int:
        """Eval requests waiting in the batch queues (of all models)."""
        return sum(q.count for q in self._queues.values())

    async def _wait_for_room(self, conn: Connection) -> None:
        """Stop reading from ``conn`` while it holds too many unanswered requests or unread
        replies; its client's sends then block in the kernel instead of growing our memory."""
        while conn.pending >= self.settings.max_pending_per_connection and not conn.closed:
            conn.room.clear()
            await conn.room.wait()
        await conn.writer.drain()  # returns at once below the write buffer's high-water mark

    def _admit(self, conn: Connection) -> bool:
        """Make room for ``conn`` under the caps (closing who gives way) and add it; False:
        refused (BUSY sent)."""
        victims = self._peers.admit(conn)
        if victims is None:
            total, own = self.settings.max_connections, self.settings.max_connections_per_peer
            self._sheds.warning(
                "refused a connection of %s: %d are open (the most %d, %d per peer)",
                conn.peer, len(self._connections), total, own,
            )  # fmt: skip
            msg = f"the server has its most connections ({total}, {own} per user or address)"
            self._error(conn, 0, Status.BUSY, msg)
            conn.writer.close()
            return False
        for victim in victims:
            self._sheds.warning(
                "closed a connection of %s (%s) to make room for one of %s",
                victim.peer, "proven" if victim.proven else "silent", conn.peer,
            )  # fmt: skip
            self.metrics.errors.labels("SHED").inc()
            self._close_connection(victim, abort=True)
        self._connections.add(conn)
        self._peers.add(conn)
        return True

    def _silent_too_long(self, conn: Connection) -> None:
        """The handshake deadline: close ``conn`` if it has not completed a frame yet."""
        if conn.proven or conn.closed:
            return
        limit = self.settings.handshake_timeout_s
        self._silent.warning(
            "closed a connection of %s that sent no complete frame in %.1f s", conn.peer, limit
        )
        self._close_connection(conn, abort=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        conn = Connection(writer, is_unix=self._unix_inode is not None, peer=peer_of(sock))
        if not self._admit(conn):
            return
        limit = self.settings.max_unsent_bytes
        writer.transport.set_write_buffer_limits(high=limit, low=limit // 2)
        # The kernel would grow a TCP send buffer to megabytes of replies nobody reads
        # (autotuning), each computed before the bound above could see them: fix it small.
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, limit)
        deadline = None
        if self.settings.handshake_timeout_s > 0:
            loop = asyncio.get_running_loop()
            delay = self.settings.handshake_timeout_s
            deadline = loop.call_later(delay, self._silent_too_long, conn)
        gone = False
        try:
            while not conn.closed:
                await self._wait_for_room(conn)
                (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
                if length > self.settings.max_frame_bytes:
                    # The stream cannot be resynchronised after a bogus prefix: say so and close.
                    self._error(conn, 0, Status.FRAME_TOO_LARGE, f"frame of {length} bytes")
                    await writer.drain()
                    break
                conn.reading_bytes = length  # counted before it is read: a slow sender holds it
                self._enforce_budget()
                body = await reader.readexactly(length)
                conn.reading_bytes = 0
                conn.proven, conn.last_frame = True, time.monotonic()
                self._dispatch(conn, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            gone = True  # the client went away: nobody will read what it asked for
        finally:
            if deadline is not None:
                deadline.cancel()
            self._close_connection(conn, abort=gone or conn.closed)

    def _close_connection(self, conn: Connection, abort: bool) -> None:
        """Forget ``conn``: drop its queued requests, then close it (``abort``: at once, freeing
        its unsent replies; else after they went out, e.g. a FRAME_TOO_LARGE reply)."""
        conn.closed = True
        conn.reading_bytes = 0
        conn.room.set()  # a reader waiting for room sees the connection closed
        self._connections.discard(conn)
        self._peers.discard(conn)
        self._drop_queued(conn)
        if abort:
            conn.writer.transport.abort()
        else:
            conn.writer.close()

    def _enforce_budget(self) -> None:
        """Close the connections holding the most until all together hold at most
        ``max_held_bytes`` (see the module docstring)."""
        limit = self.settings.max_held_bytes
        # Called per frame and per batch: the common case (under budget) builds nothing.
        if sum(conn.held_bytes() for conn in self._connections) <= limit:
            return
        while self._connections:
            held = {conn: conn.held_bytes() for conn in self._connections}
            total = sum(held.values())
            if total <= limit:
                return
            victim = max(held, key=held.__getitem__)
            self._sheds.warning(
                "closed a connection holding %d bytes (queued %d, unread replies %d): the "
                "connections held %d bytes, the most is %d (max_held_bytes)",
                held[victim], victim.queued_bytes, victim.unsent_bytes(), total, limit,
            )  # fmt: skip
            self.metrics.errors.labels("SHED").inc()
            self._close_connection(victim, abort=True)

    def _drop_queued(self, conn: Connection) -> None:
        """Forget the queued requests of a closed connection (nobody will read their replies)."""
        for model_id, queue in self._queues.items():
            if queue.drop(conn):
                self.metrics.queue_rows.labels(str(model_id)).set(queue.rows)
        conn.queued_bytes = 0

    def _error(
        self,
        conn: Connection,
        request_id: int,
        status: Status,
        message: str,
        version: int = PROTOCOL_VERSION,
    ) -> None:
        self.metrics.errors.labels(status.name).inc()
        conn.send(encode_error(request_id, status, message, version))

    def _dispatch(self, conn: Connection, body: bytes) -> None:
        arrival = time.perf_counter()
        try:
            request = decode_request(body)
        except ProtocolError as err:
            # A peer of another version gets the answer in its own header, so it can say why.
            version = body[2] if err.status == Status.UNSUPPORTED_VERSION else PROTOCOL_VERSION
            self._error(conn, err.request_id, err.status, err.message, version)
            return
        if isinstance(request, ControlRequest):
            task = asyncio.create_task(self._control(conn, request))
            self._control_tasks.add(task)  # keep a reference until done (asyncio holds weak ones)
            task.add_done_callback(self._control_tasks.discard)
            return
        served = self.models.get(request.model_id)
        rid = request.request_id
        if served is None:
            ids = ", ".join(str(i) for i in sorted(self.models)) or "none"
            self._error(conn, rid, Status.UNKNOWN_MODEL, f"model_id {request.model_id} not served")
            log.debug("unknown model %s (served: %s)", request.model_id, ids)
            return
        if request.feature_schema_id != served.feature_schema_id:
            msg = (
                f"feature_schema_id {request.feature_schema_id} does not match model "
                f"{request.model_id} (schema {served.feature_schema_id})"
            )
            self._error(conn, rid, Status.SCHEMA_MISMATCH, msg)
            return
        refusal = (
            refuse_positions(request, served.positions, served.num_actions)
            if isinstance(request, PositionRequest)
            else refuse_features(request, served.num_features, served.num_actions)
        ) or refuse_budget(request.rows, served.bytes_per_row, self.settings.max_forward_bytes)
        if refusal is not None:
            self._error(conn, rid, *refusal)
            return
        queue = self._queues[request.model_id]
        conn.pending += 1
        conn.queued_bytes += len(body)
        queue.push(Pending(request, conn, arrival, len(body)))
        self.metrics.queue_rows.labels(str(request.model_id)).set(queue.rows)
        queue.wake.set()

    # ---------------------------------------------------------------- control
    async def _control(self, conn: Connection, request: ControlRequest) -> None:
        rid = request.request_id
        if request.op == ControlOp.INFO:
            info = {str(i): m.describe() for i, m in sorted(self.models.items())}
            conn.send(text_reply(rid, json.dumps({"models": info, "address": self.address})))
        elif request.op == ControlOp.CHALLENGE:
            conn.nonce = new_nonce()  # replaces an unused one: each nonce signs one load
            conn.send(text_reply(rid, json.dumps({"nonce": conn.nonce.hex()})))
        elif request.op == ControlOp.LOAD_MODEL:
            signature, path = split_signature(request.argument)
            nonce, conn.nonce = conn.nonce, None  # used up whatever the outcome
            refusal = admin_refusal(
                self.settings.admin_token, signature, nonce, request.model_id, path,
                conn.is_unix, self.settings.unix_needs_token,
            )  # fmt: skip
            if refusal:
                msg = "refused LOAD_MODEL of model %s: %s"
                self._refusals.warning(msg, request.model_id, refusal)
                self._error(conn, rid, Status.UNAUTHORIZED, refusal)
                return
            error = await self._load(request.model_id, path)
            if error:
                self._error(conn, rid, Status.LOAD_FAILED, error)
            else:
                described = self.models[request.model_id].describe()
                conn.send(text_reply(rid, json.dumps({str(request.model_id): described})))
        else:
            self._error(conn, rid, Status.UNKNOWN_OP, f"unknown control op {request.op}")


async def serve_forever(
    server: InferenceServer,
    endpoint: Endpoint,
    metrics_bind: tuple[str, int] | None = None,
    on_ready: Callable[[str, int | None], None] | None = None,
) -> None:
    """Run ``server`` until SIGTERM or SIGINT, then shut down cleanly; SIGHUP reloads models.

    ``metrics_bind`` (host, port) starts ``/metrics``; ``on_ready(address, metrics_port)`` is
    called once the socket accepts connections.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(server.reload_all()))
    address = await server.start(endpoint)
    try:
        metrics_port = None
        if metrics_bind is not None:
            metrics_port = server.metrics.serve_http(*metrics_bind)
        if on_ready is not None:
            on_ready(address, metrics_port)
        await stop.wait()
    finally:
        await server.close()
