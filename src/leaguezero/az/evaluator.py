"""The evaluator protocol: what search calls to get priors and values for a batch of leaves.

Implementations: a uniform stub (here), an oracle-value heuristic (Yatzy, for tests), an
in-process batched torch model, and the inference-server socket client.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


class Evaluator(Protocol):
    """Maps a batch of encoded positions to policy priors and values.

    ``evaluate(features, legal)``:

    * ``features``: float32 [N, F] positions, each from the point of view of the player to move;
    * ``legal``: bool [N, A] legal actions;
    * returns ``priors`` float32 [N, A] (a distribution over the legal actions, 0 elsewhere)
      and ``values`` float32 [N] in [-1, 1] for the player to move.

    Optional members, each declared by a runtime-checkable protocol below that a caller tests
    with ``isinstance`` (never ``hasattr``/``getattr``): ``evaluate_values``
    (:class:`ValueEvaluator`), ``evaluate_position_values`` (:class:`PositionValueEvaluator`),
    ``evaluate_positions_async`` (:class:`PositionEvaluator`), ``evaluate_async``
    (:class:`AsyncEvaluator`), ``margin_weight`` (:class:`MarginEvaluator`, read through
    :func:`margin_weight`) and ``close`` (:class:`ClosableEvaluator`).
    """

    feature_schema_id: int
    num_actions: int

    def evaluate(
        self, features: np.ndarray, legal: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class ValueEvaluator(Protocol):
    """An evaluator that can skip the policy: ``evaluate_values(features)`` returns only the
    search utility, float32 [N] in [-1, 1] for the player to move (what
    :func:`mix_utility` makes of the value and margin heads). A search that uses no priors
    (Yatzy's turn search) asks for this when the evaluator offers it."""

    def evaluate_values(self, features: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class PositionValueEvaluator(Protocol):
    """An evaluator that takes a game's compact position rows instead of features (the inference
    server's client: protocol kind 4): ``evaluate_position_values(positions, position_schema_id)``
    returns the search utility float32 [N] of ``positions`` int [N, W]; the server encodes them
    and deduplicates their boards. Over a socket this sends a few ints a row, not F floats."""

    def evaluate_position_values(
        self, positions: np.ndarray, position_schema_id: int
    ) -> np.ndarray: ...


@runtime_checkable
class PositionEvaluator(Protocol):
    """An evaluator that takes a game's compact position rows for priors and values (the
    inference server's client: protocol kind 4 with A > 0):
    ``evaluate_positions_async(positions, position_schema_id)`` submits ``positions`` int
    [N, W] and returns at once a :class:`PendingEvaluation` of what :meth:`Evaluator.evaluate`
    gives for their features and legal actions, which the server computes from the rows. A
    search whose game writes position rows (``GameKernels.position_width`` > 0) sends its leaves
    this way when the evaluator offers it: over a socket a few ints a row instead of F floats
    and A legal bits."""

    def evaluate_positions_async(
        self, positions: np.ndarray, position_schema_id: int
    ) -> PendingEvaluation: ...


class PendingEvaluation(Protocol):
    """A batch in flight: ``result()`` waits for its ``(priors, values)``."""

    def result(self) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class AsyncEvaluator(Protocol):
    """An evaluator that can keep batches in flight (the inference server's client):
    ``evaluate_async(features, legal)`` submits a batch and returns at once. A search that has
    several groups of leaves pipelines them through it when the evaluator offers it."""

    def evaluate_async(self, features: np.ndarray, legal: np.ndarray) -> PendingEvaluation: ...


@runtime_checkable
class MarginEvaluator(Protocol):
    """An evaluator whose values are search utilities mixing the value and margin heads with
    ``margin_weight`` (:func:`mix_utility`); searches score exact game ends with the same
    weight. Evaluators without it serve plain win/draw/loss values (weight 0)."""

    margin_weight: float


@runtime_checkable
class ClosableEvaluator(Protocol):
    """An evaluator that holds a resource (a connection) to release with ``close()``."""

    def close(self) -> None: ...


def margin_weight(evaluator: Evaluator) -> float:
    """The margin weight of ``evaluator``'s utility: its ``margin_weight`` when it declares one
    (:class:`MarginEvaluator`; None counts as 0), else 0."""
    if isinstance(evaluator, MarginEvaluator):
        return float(evaluator.margin_weight or 0.0)
    return 0.0


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of ``logits`` [N, A] over ``legal`` [N, A]; rows with no legal action are 0."""
    z = np.where(legal, logits.astype(np.float64), -np.inf)
    zmax = z.max(axis=1, keepdims=True)
    zmax = np.where(np.isfinite(zmax), zmax, 0.0)
    e = np.where(legal, np.exp(z - zmax), 0.0)
    total = e.sum(axis=1, keepdims=True)
    out = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return out.astype(np.float32)


class UniformEvaluator:
    """Uniform priors over legal actions and value 0: the stub for search tests and benchmarks."""

    def __init__(self, feature_schema_id: int, num_actions: int) -> None:
        self.feature_schema_id = feature_schema_id
        self.num_actions = num_actions

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        counts = legal.sum(axis=1, keepdims=True)
        priors = np.divide(
            legal.astype(np.float32),
            counts,
            out=np.zeros(legal.shape, np.float32),
            where=counts > 0,
        )
        return priors, np.zeros(legal.shape[0], dtype=np.float32)


def mix_utility(values: np.ndarray, margins: np.ndarray | None, weight: float) -> np.ndarray:
    """Search utility ``(value + weight * margin) / (1 + weight)`` (float32 [N]).

    ``values`` are win/draw/loss estimates and ``margins`` score-margin estimates, both in
    [-1, 1] for the player to move; without a margin head (``None``) or with ``weight == 0``
    the values pass through.
    """
    if margins is None or weight <= 0:
        return np.asarray(values, dtype=np.float32)
    return ((values + weight * margins) / (1.0 + weight)).astype(np.float32)
