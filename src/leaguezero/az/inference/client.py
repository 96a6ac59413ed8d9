"""The inference-server client: an Evaluator over one or more servers, plus a ticket API.

``submit(features, legal)`` (or ``submit_positions(positions, ...)``, the compact kind a
game's server encodes itself) encodes one frame for the whole batch, registers a ticket under a
fresh ``request_id`` and sends it; a reader thread per server decodes replies and completes the
ticket's ``Future``, so replies may arrive in any order. ``evaluate`` is ``submit`` + wait +
masked softmax: the blocking call a lockstep search makes once per leaf batch.

Several servers (``tcp://h1:p,tcp://h2:p``, one per GPU) share the load, and a server that
goes away is reconnected with backoff while its requests go to the others
(:mod:`~leaguezero.az.inference.client_links`: failover, the hello, backpressure). At most
``max_pending_total`` rows are in flight; ``submit`` blocks until replies free room.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from concurrent.futures import Future

import numpy as np

from leaguezero.az.evaluator import mix_utility
from leaguezero.az.inference.admin import load_signed
from leaguezero.az.inference.client_evaluators import PendingEvaluation
from leaguezero.az.inference.client_links import ClientLinks
from leaguezero.az.inference.client_stats import ClientStats
from leaguezero.az.inference.endpoint import Endpoint, UntrustedSocketError, parse_endpoints
from leaguezero.az.inference.links import Link, Ticket, shutdown_socket
from leaguezero.az.inference.protocol import (
    ControlOp,
    InferenceError,
    Reply,
    encode_eval_request,
    encode_position_request,
)


class InferenceClient(ClientLinks):
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
                        reply = load_signed(call, link.endpoint, model_id, path, admin_token)
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
    "ClientStats",
    "InferenceClient",
    "InferenceError",
    "ModelEvaluator",
    "PendingEvaluation",
]
