"""Prometheus metrics of the inference server, on a registry of its own (one per server).

Names (all labelled ``model`` = model_id, except errors):

* ``lz_infer_evals_total``: rows evaluated (``rate()`` of it is evals/s);
* ``lz_infer_requests_total``: request frames answered with status OK;
* ``lz_infer_batch_rows``: histogram of rows per forward pass (the dynamic batch size);
* ``lz_infer_queue_rows``: gauge of rows waiting for a forward pass;
* ``lz_infer_latency_seconds``: histogram, frame received -> reply queued for sending;
* ``lz_infer_forward_seconds``: histogram of forward-pass time (batch concat + model + encode);
* ``lz_infer_errors_total{status}``: error replies by status name.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)


class ServerMetrics:
    """The server's metric objects; ``serve_http`` exposes ``/metrics`` on a separate port."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.evals = Counter("lz_infer_evals", "Rows evaluated.", ["model"], registry=r)
        self.requests = Counter("lz_infer_requests", "Frames served OK.", ["model"], registry=r)
        self.batch_rows = Histogram(
            "lz_infer_batch_rows", "Rows per forward pass.", ["model"], buckets=BATCH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.queue_rows = Gauge("lz_infer_queue_rows", "Rows waiting.", ["model"], registry=r)
        self.latency = Histogram(
            "lz_infer_latency_seconds", "Frame received to reply queued.", ["model"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.forward = Histogram(
            "lz_infer_forward_seconds", "Forward pass time.", ["model"], buckets=LATENCY_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.errors = Counter("lz_infer_errors", "Error replies.", ["status"], registry=r)
        self._http = None

    def serve_http(self, host: str, port: int) -> int:
        """Start the ``/metrics`` HTTP server in a daemon thread; returns the bound port."""
        self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._http.server_address[1])

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
