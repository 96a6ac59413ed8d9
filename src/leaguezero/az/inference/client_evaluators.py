"""What a client's reply becomes for a search: :class:`PendingEvaluation` (an evaluation in
flight, as :meth:`~leaguezero.az.inference.client.InferenceClient.evaluate_async` returns it)
and the masked softmax of server logits it applies (:func:`softmax_masked_logits`)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from leaguezero.az.evaluator import mix_utility
from leaguezero.az.inference.protocol import Reply


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
