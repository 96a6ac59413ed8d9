"""What an inference server serves and under which limits: :class:`ServedModel` (a model and
what its requests must match), :class:`ServerSettings` (batching, where forward passes run, the
connection and memory bounds :mod:`~leaguezero.az.inference.server` enforces), and
:class:`ServerError` (the server cannot start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from leaguezero.az.inference.local import (
    ValueForwardModel,
    ValueFunction,
    forward_bytes_per_row,
    model_dims,
)
from leaguezero.az.inference.positions import PositionCodec
from leaguezero.az.inference.protocol import MAX_FRAME_BYTES


class ServerError(RuntimeError):
    """The server cannot start (unsafe TCP bind, ...); the message says why."""


@dataclass
class ServedModel:
    """A model ready to serve: the module plus what requests must match."""

    model: nn.Module  # forward(x [N, F]) -> (logits [N, A], value [N], margin [N] | None)
    feature_schema_id: int
    source: str  # checkpoint path, or a description such as "dummy"
    num_features: int = 0
    num_actions: int = 0
    # Forward dtype: bfloat16 for self-play on CPUs with native bf16 units (as in process);
    # float32 where exact values matter (a server that gates).
    dtype: torch.dtype = torch.float32
    # Values-only requests: the model's own value path when it has one (on CPU), else None.
    value_function: ValueFunction | None = None
    # Position requests (kind 4): how this model reads the game's compact rows; None: refused.
    positions: PositionCodec | None = None
    bytes_per_row: int = 0  # forward-pass memory of one row (estimated when 0)

    def __post_init__(self) -> None:
        self.num_features, self.num_actions = model_dims(self.model)
        if self.bytes_per_row <= 0:
            self.bytes_per_row = forward_bytes_per_row(
                self.model, self.num_features, self.num_actions
            )
        self.model = self.model.to(dtype=self.dtype).eval()
        # Built from the CPU weights the loader gives; the server uses it on a CPU device only.
        if isinstance(self.model, ValueForwardModel) and self.value_function is None:
            self.value_function = self.model.value_forward(self.dtype)

    def describe(self) -> dict[str, object]:
        return {
            "source": self.source,
            "feature_schema_id": self.feature_schema_id,
            "num_features": self.num_features,
            "num_actions": self.num_actions,
            "dtype": str(self.dtype).removeprefix("torch."),
            "position_schema_id": None
            if self.positions is None
            else self.positions.position_schema_id,
            "forward_bytes_per_row": self.bytes_per_row,
        }


# Builds a ServedModel from a LOAD_MODEL argument (a checkpoint path); runs on the executor.
ModelLoader = Callable[[str], ServedModel]


@dataclass
class ServerSettings:
    max_batch: int = 256  # flush at this many queued rows...
    max_wait_us: int = 500  # ...or when the oldest frame is this old...
    # ...or at once when every connection that uses the model has a frame queued (False: only
    # the two rules above, a fixed batching window).
    eager_flush: bool = True
    device: str = "cpu"
    # Where forward passes run: "loop" (the event loop's thread, between socket reads), "thread"
    # (one executor thread, so the loop reads and writes meanwhile), "auto": loop on a CPU
    # device, thread on an accelerator. On a CPU the hand-off to a thread and back cost about
    # 0.4 ms of server CPU per batch (benchmarks/search.py (b)), more than the socket IO it
    # overlaps; an accelerator's forward leaves the CPU free for that IO.
    forward_on: str = "auto"
    public: bool = False  # allow TCP binds that other machines can reach
    # Longest request frame (the turn search's 8,192-row values-only frames are ~5.5 MB).
    max_frame_bytes: int = 64 * 1024 * 1024
    # LOAD_MODEL needs a signature under this token over TCP (None: refused over TCP);
    # optional on a Unix socket...
    admin_token: str | None = None
    unix_needs_token: bool = False  # ...unless this is set (yz infer-server --admin-token-file)
    max_pending_per_connection: int = 1024  # unanswered requests one connection may hold...
    # ...and reply bytes it has not read yet: past it the server neither reads nor computes
    # for it until it reads (small: a client that reads has next to nothing unread). The
    # kernel's send buffer of the connection is set to this too (it holds about twice that).
    max_unsent_bytes: int = 256 * 1024
    max_connections: int = 128  # in all; more are answered BUSY and closed (see the docstring)
    max_connections_per_peer: int = 64  # of one user (Unix, loopback TCP) or remote address
    # A connection that has not completed a frame this long after it opened is closed (0: never).
    handshake_timeout_s: float = 5.0
    # Frames being read + queued requests + unread replies over all connections; past it the
    # connection holding the most is closed.
    max_held_bytes: int = 256 * 1024 * 1024
    # Memory one forward pass may take (rows x the model's bytes per row): a request over it is
    # refused OVER_BUDGET, and batches are cut to fit it.
    max_forward_bytes: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        self.max_frame_bytes = min(self.max_frame_bytes, MAX_FRAME_BYTES)
        if self.forward_on not in ("auto", "loop", "thread"):
            raise ValueError(f"forward_on must be auto, loop or thread, not {self.forward_on!r}")

    def forward_on_loop(self) -> bool:
        """Whether forward passes run on the event loop's thread (see ``forward_on``)."""
        if self.forward_on == "auto":
            return torch.device(self.device).type == "cpu"
        return self.forward_on == "loop"
