"""In-process batched torch evaluation (the baseline the socket path is measured against).

A policy-value model here is any ``nn.Module`` whose ``forward(x [N, F])`` returns
``(logits [N, A], value [N], margin [N] | None)`` (e.g. ``leaguezero.yatzy.net.networks.YatzyNet``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from leaguezero.az.evaluator import mix_utility
from leaguezero.common.hardware import cpu_has_native_bf16


@dataclass
class ForwardResult:
    logits: np.ndarray  # [N, A] float32
    values: np.ndarray  # [N] float32
    margins: np.ndarray | None  # [N] float32, or None without a margin head


# (values float32 [N], margins float32 [N] or None) from float32 features [N, F].
ValueFunction = Callable[[np.ndarray], tuple[np.ndarray, "np.ndarray | None"]]


@runtime_checkable
class ValueForwardModel(Protocol):
    """A model with a value-only CPU path: ``value_forward(dtype)`` returns a function of numpy
    features that computes the value and margin heads (and skips the policy head) — e.g. the
    Yatzy board-tower net, which also evaluates each distinct board's tower once."""

    def value_forward(self, dtype: torch.dtype) -> ValueFunction: ...


def model_dims(model: nn.Module) -> tuple[int, int]:
    """``(F, A)`` of a policy-value model, read from its ``num_features``/``num_actions``."""
    try:
        return int(model.num_features), int(model.num_actions)
    except AttributeError:
        raise ValueError(
            f"{type(model).__name__} must expose num_features and num_actions"
        ) from None


def forward_bytes_per_row(model: nn.Module, num_features: int, num_actions: int) -> int:
    """Bytes of memory one row costs in the forward pass of ``model``, an upper estimate.

    Counted as float32: the features three times (the request's concatenated copy, a server's
    encoding of positions or the dtype cast, and one more), the logits three times (masking,
    conversion, the reply), and each linear layer's output once. Measured (peak RSS, 100,000
    random rows, float32; tests/az/test_forward_budget.py): the default turn-search net 5.3 KB
    a row (value path or plain forward, features copy included) vs 6.4 KB estimated; a 256x2
    YatzyNet 4.5 KB vs 7.0 KB; a 32x1 YatzyNet 1.2 KB vs 2.3 KB.
    """
    linear_outputs = sum(m.out_features for m in model.modules() if isinstance(m, nn.Linear))
    return 4 * (3 * num_features + 3 * num_actions + linear_outputs + 8)


def forward_numpy(
    model: nn.Module,
    features: np.ndarray,
    device: torch.device | str = "cpu",
    legal: np.ndarray | None = None,
) -> ForwardResult:
    """Run ``model`` on float32 ``features`` [N, F]; optionally set illegal logits to -inf.

    ``legal`` bool [N, A]: when given, logits of illegal actions become ``-inf`` (the server
    does this so that a reply is self-contained).
    """
    with torch.inference_mode():
        x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
        # A bfloat16 model (a self-play server) reads bfloat16; a model without parameters, float32.
        dtype = next(model.parameters(), x).dtype
        logits, values, margins = model(x.to(device, dtype))
        if legal is not None:
            mask = torch.from_numpy(np.ascontiguousarray(legal)).to(device)
            logits = logits.masked_fill(~mask, float("-inf"))
        return ForwardResult(
            logits.float().cpu().numpy(),
            values.float().cpu().numpy(),
            None if margins is None else margins.float().cpu().numpy(),
        )


def masked_softmax_torch(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` [N, A] over ``legal`` bool [N, A]; rows with no legal action are 0."""
    masked = logits.masked_fill(~legal, float("-inf"))
    priors = torch.softmax(masked, dim=-1)
    return torch.nan_to_num(priors, nan=0.0)  # all-illegal rows give 0/0


def resolve_dtype(name: str, device: torch.device | str = "cpu") -> torch.dtype:
    """The forward dtype for ``name``: ``float32``, ``bfloat16``, or ``auto`` (bfloat16 on CUDA
    and on CPUs with native bfloat16 matrix units — AMX or AVX512-BF16 — else float32)."""
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    if name != "auto":
        raise ValueError(f"unknown inference dtype {name!r}: use auto, float32 or bfloat16")
    if torch.device(device).type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


class TorchEvaluator:
    """The Evaluator protocol over a torch model in this process.

    Args:
        model: a policy-value model (see module docstring); put in eval mode (and cast to
            ``dtype``) here.
        feature_schema_id: the feature schema the model was trained on (checked by callers).
        device: torch device for the forward pass.
        margin_weight: the search utility's margin weight (:func:`mix_utility`).
        dtype: forward dtype; ``torch.bfloat16`` runs ~4x faster on CPUs with AMX and changes
            values by ~1e-3 (self-play uses it; evaluation stays float32).
    """

    def __init__(
        self,
        model: nn.Module,
        feature_schema_id: int,
        device: torch.device | str = "cpu",
        margin_weight: float = 0.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.margin_weight = margin_weight  # search utility: see az.evaluator.mix_utility
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = model.to(self.device, dtype).eval()
        self.feature_schema_id = feature_schema_id
        self.num_features, self.num_actions = model_dims(model)
        # The value-only path reads the weights now (as cast above): build another evaluator
        # after the model's weights change.
        self._value_forward: ValueFunction | None = None
        if isinstance(model, ValueForwardModel) and self.device.type == "cpu":
            self._value_forward = model.value_forward(dtype)

    def evaluate_values(self, features: np.ndarray) -> np.ndarray:
        """The search utility float32 [N] for ``features`` [N, F], without the policy head."""
        if features.shape[1:] != (self.num_features,):
            raise ValueError(f"expected features [N, {self.num_features}]; got {features.shape}")
        if self._value_forward is not None:
            values, margins = self._value_forward(features)
            return mix_utility(values, margins, self.margin_weight)
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
            _, values, margins = self.model(x.to(self.device, self.dtype))
            margin_np = None if margins is None else margins.float().cpu().numpy()
            return mix_utility(values.float().cpu().numpy(), margin_np, self.margin_weight)

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Priors float32 [N, A] (masked softmax) and values float32 [N] for ``features`` [N, F]."""
        if features.shape[1:] != (self.num_features,) or legal.shape[1:] != (self.num_actions,):
            raise ValueError(
                f"expected features [N, {self.num_features}] and legal [N, {self.num_actions}]; "
                f"got {features.shape} and {legal.shape}"
            )
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
            x = x.to(self.device, self.dtype)
            mask = torch.from_numpy(np.ascontiguousarray(legal, dtype=np.bool_)).to(self.device)
            logits, values, margins = self.model(x)
            priors = masked_softmax_torch(logits.float(), mask)
            margin_np = None if margins is None else margins.float().cpu().numpy()
            return priors.cpu().numpy(), mix_utility(
                values.float().cpu().numpy(), margin_np, self.margin_weight
            )
