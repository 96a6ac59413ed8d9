"""What an :class:`~leaguezero.az.inference.client.InferenceClient` counts: requests, rows,
reconnects, resent requests and a latency histogram (:class:`ClientStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
