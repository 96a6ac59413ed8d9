"""Inference protocol v2: binary, length-prefixed frames (byte layout in
docs/reference/protocol.md).

Every frame is ``u32 body_length`` followed by ``body_length`` bytes of body; all integers and
floats are little-endian. A body starts with ``b"LZ"``, the protocol version (u8) and a kind (u8):

* ``EVAL_REQUEST`` (1): N >= 1 rows of float32 features [N, F] and packed legal bits [N, ceil(A/8)]
  for one ``model_id``; a lockstep search sends its whole leaf batch as one frame;
* ``REPLY`` (2): status, then (when OK) logits [N, A], values [N], optional margins [N], and a
  UTF-8 text tail (the error message, or JSON for control replies);
* ``CONTROL_REQUEST`` (3): ``op`` + ``model_id`` + UTF-8 argument (load a checkpoint, info, an
  admin challenge);
* ``POSITION_REQUEST`` (4): N >= 1 positions as the game's compact int32 rows [N, W] (Yatzy: the
  first 9 fields of its state row) that the server encodes itself: a client sends ~36 bytes a
  row instead of 4 * F bytes of features (and no legal bits). A = 0 asks for values only (the
  server's value path sees the boards it deduplicates); A > 0 for logits too, masked by the
  legal actions the server's codec computes from the rows (a PUCT search's leaves).

Version 2 added kind 4 (values only) and the admin challenge; version 3 (this one) added logits
to kind 4. A peer of another version gets one error reply, written in *its* version's header so
that it can read it.

All array work is numpy on whole buffers: no per-row Python.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

PROTOCOL_VERSION = 3
MAGIC = b"LZ"
LENGTH = struct.Struct("<I")  # frame prefix: body length in bytes
MAX_FRAME_BYTES = 256 * 1024 * 1024  # larger prefixes are treated as garbage

KIND_EVAL_REQUEST = 1
KIND_REPLY = 2
KIND_CONTROL_REQUEST = 3
KIND_POSITION_REQUEST = 4

# magic, version, kind, request_id, model_id, feature_schema_id, rows N, features F, actions A
EVAL_HEADER = struct.Struct("<2sBBQIIIII")  # 32 bytes
# magic, version, kind, request_id, status, flags, rows N, actions A
REPLY_HEADER = struct.Struct("<2sBBQHHII")  # 24 bytes
# magic, version, kind, request_id, op, model_id
CONTROL_HEADER = struct.Struct("<2sBBQII")  # 20 bytes
# magic, version, kind, request_id, model_id, feature_schema_id, position_schema_id, rows N,
# ints per row W, actions A (0: values only; else logits too)
POSITION_HEADER = struct.Struct("<2sBBQIIIIII")  # 36 bytes

FLAG_MARGINS = 1  # reply carries margins [N] after values


class Status(IntEnum):
    """Reply status codes; everything but OK comes with a UTF-8 message."""

    OK = 0
    MALFORMED = 1  # the body cannot be parsed (bad magic, sizes, kind)
    UNSUPPORTED_VERSION = 2
    SCHEMA_MISMATCH = 3  # feature_schema_id differs from the model's
    UNKNOWN_MODEL = 4
    SHAPE_MISMATCH = 5  # F or A differs from the model's
    FRAME_TOO_LARGE = 6  # the connection is closed after this reply
    LOAD_FAILED = 7  # a control LOAD_MODEL failed; the old model keeps serving
    INTERNAL = 8
    UNKNOWN_OP = 9
    UNAUTHORIZED = 10  # an admin op (LOAD_MODEL) without the server's admin token
    NON_FINITE = 11  # the request's features (or the model's outputs) hold NaN or infinity
    BUSY = 12  # the server holds its most connections; the connection is closed after this reply
    OVER_BUDGET = 13  # the forward pass of this request would take more memory than allowed


class ControlOp(IntEnum):
    LOAD_MODEL = 1  # argument: [admin token line +] checkpoint path (server-side); admin op
    INFO = 2  # reply text: JSON {model_id: {...}} of the served models
    CHALLENGE = 3  # reply text: JSON {"nonce": HEX}, to be signed by the next LOAD_MODEL


class ProtocolError(Exception):
    """A frame that cannot be served; the server turns it into an error reply."""

    def __init__(self, status: Status, message: str, request_id: int = 0) -> None:
        super().__init__(message)
        self.status = Status(status)
        self.message = message
        self.request_id = request_id


class InferenceError(RuntimeError):
    """The server answered a request with an error status."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"inference server error {status.name}: {message}")
        self.status = status


@dataclass
class EvalRequest:
    request_id: int
    model_id: int
    feature_schema_id: int
    features: np.ndarray  # [N, F] float32
    legal: np.ndarray  # [N, A] bool

    @property
    def rows(self) -> int:
        return self.features.shape[0]


@dataclass
class PositionRequest:
    """Request of N positions in the game's compact int32 layout [N, W]; the server encodes them
    into features (schema ``feature_schema_id``) before the forward pass. ``num_actions`` 0:
    values only; A: logits [N, A] too, illegal actions (by the server's codec) ``-inf``."""

    request_id: int
    model_id: int
    feature_schema_id: int
    position_schema_id: int
    positions: np.ndarray  # [N, W] int32
    num_actions: int = 0

    @property
    def rows(self) -> int:
        return self.positions.shape[0]


@dataclass
class ControlRequest:
    request_id: int
    op: int
    model_id: int
    argument: str


@dataclass
class Reply:
    request_id: int
    status: Status
    logits: np.ndarray  # [N, A] float32 (N = 0 on errors and control replies)
    values: np.ndarray  # [N] float32
    margins: np.ndarray | None  # [N] float32 when the model has a margin head
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


_EMPTY = (np.zeros((0, 0), np.float32), np.zeros(0, np.float32), None)


def legal_bytes_per_row(num_actions: int) -> int:
    return (num_actions + 7) // 8


def pack_legal(legal: np.ndarray) -> np.ndarray:
    """bool [N, A] -> uint8 [N, ceil(A/8)]; action ``a`` is bit ``a % 8`` of byte ``a // 8``."""
    return np.packbits(legal, axis=1, bitorder="little")


def unpack_legal(bits: np.ndarray, num_actions: int) -> np.ndarray:
    """uint8 [N, ceil(A/8)] -> bool [N, A] (inverse of :func:`pack_legal`)."""
    return np.unpackbits(bits, axis=1, count=num_actions, bitorder="little").astype(np.bool_)


def _frame(*parts: bytes) -> bytes:
    body_length = sum(len(p) for p in parts)
    return b"".join((LENGTH.pack(body_length), *parts))


def encode_eval_request(
    request_id: int,
    model_id: int,
    feature_schema_id: int,
    features: np.ndarray,
    legal: np.ndarray,
) -> bytes:
    """A framed EVAL_REQUEST for ``features`` float32 [N, F] and ``legal`` bool [N, A]."""
    features = np.ascontiguousarray(features, dtype="<f4")
    if features.ndim != 2 or legal.ndim != 2 or legal.shape[0] != features.shape[0]:
        raise ValueError(
            f"features must be [N, F] and legal [N, A]; got {features.shape} and {legal.shape}"
        )
    n, f = features.shape
    a = legal.shape[1]
    header = EVAL_HEADER.pack(
        MAGIC, PROTOCOL_VERSION, KIND_EVAL_REQUEST, request_id, model_id, feature_schema_id, n, f, a
    )
    return _frame(header, features.tobytes(), pack_legal(legal).tobytes())


def encode_position_request(
    request_id: int,
    model_id: int,
    feature_schema_id: int,
    position_schema_id: int,
    positions: np.ndarray,
    num_actions: int = 0,
) -> bytes:
    """A framed POSITION_REQUEST for ``positions`` int [N, W] (sent as int32): values only when
    ``num_actions`` is 0, else logits over that many actions too."""
    if positions.ndim != 2:
        raise ValueError(f"positions must be [N, W]; got {positions.shape}")
    n, w = positions.shape
    header = POSITION_HEADER.pack(
        MAGIC, PROTOCOL_VERSION, KIND_POSITION_REQUEST, request_id, model_id,
        feature_schema_id, position_schema_id, n, w, num_actions,
    )  # fmt: skip
    return _frame(header, np.ascontiguousarray(positions, dtype="<i4").tobytes())


def encode_control_request(request_id: int, op: int, model_id: int, argument: str = "") -> bytes:
    header = CONTROL_HEADER.pack(
        MAGIC, PROTOCOL_VERSION, KIND_CONTROL_REQUEST, request_id, op, model_id
    )
    return _frame(header, argument.encode("utf-8"))


def encode_reply(
    request_id: int,
    logits: np.ndarray,
    values: np.ndarray,
    margins: np.ndarray | None = None,
    text: str = "",
) -> bytes:
    """A framed OK reply: ``logits`` [N, A], ``values`` [N], optional ``margins`` [N] (float32)."""
    n, a = logits.shape
    flags = FLAG_MARGINS if margins is not None else 0
    header = REPLY_HEADER.pack(MAGIC, PROTOCOL_VERSION, KIND_REPLY, request_id, 0, flags, n, a)
    parts = [header, np.ascontiguousarray(logits, "<f4").tobytes()]
    parts.append(np.ascontiguousarray(values, "<f4").tobytes())
    if margins is not None:
        parts.append(np.ascontiguousarray(margins, "<f4").tobytes())
    parts.append(text.encode("utf-8"))
    return _frame(*parts)


def encode_error(
    request_id: int, status: Status, message: str, version: int = PROTOCOL_VERSION
) -> bytes:
    """A framed error reply (no arrays, the message as UTF-8). ``version``: the header's version
    byte (a peer of another version is answered in its own, so it can read why)."""
    header = REPLY_HEADER.pack(MAGIC, version, KIND_REPLY, request_id, int(status), 0, 0, 0)
    return _frame(header, message.encode("utf-8"))


def peek_request_id(body: bytes | memoryview) -> int:
    """The request id of a body, as far as it can be read (0 when the body is too short)."""
    return int.from_bytes(body[4:12], "little") if len(body) >= 12 else 0


def _check_prefix(body: bytes | memoryview, header: struct.Struct, what: str) -> tuple:
    if len(body) < 4 or bytes(body[:2]) != MAGIC:
        raise ProtocolError(Status.MALFORMED, "bad magic: not a leaguezero inference frame")
    if body[2] != PROTOCOL_VERSION:
        raise ProtocolError(
            Status.UNSUPPORTED_VERSION,
            f"protocol version {body[2]} is not supported; this server speaks {PROTOCOL_VERSION}: "
            "run client and server from the same leaguezero release",
            peek_request_id(body),
        )
    if len(body) < header.size:
        raise ProtocolError(
            Status.MALFORMED,
            f"{what} body is {len(body)} bytes, shorter than its {header.size}-byte header",
            peek_request_id(body),
        )
    return header.unpack_from(body, 0)


def decode_request(body: bytes | memoryview) -> EvalRequest | ControlRequest | PositionRequest:
    """Parse a request body (without its length prefix).

    Raises:
        ProtocolError: with the status to reply (MALFORMED, UNSUPPORTED_VERSION).
    """
    kind = body[3] if len(body) >= 4 else -1
    if kind == KIND_CONTROL_REQUEST:
        _, _, _, request_id, op, model_id = _check_prefix(body, CONTROL_HEADER, "control")
        try:
            argument = bytes(body[CONTROL_HEADER.size :]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(
                Status.MALFORMED, "control argument is not UTF-8", request_id
            ) from None
        return ControlRequest(request_id, op, model_id, argument)
    if kind == KIND_POSITION_REQUEST:
        return _decode_positions(body)
    if kind != KIND_EVAL_REQUEST:
        _check_prefix(body, EVAL_HEADER, "request")  # magic/version errors take precedence
        raise ProtocolError(Status.MALFORMED, f"unknown request kind {kind}", peek_request_id(body))
    _, _, _, request_id, model_id, schema_id, n, f, a = _check_prefix(body, EVAL_HEADER, "request")
    if n == 0 or f == 0:  # A = 0 is a values-only request (no legal bits, no logits back)
        raise ProtocolError(Status.MALFORMED, f"empty request (N={n}, F={f}, A={a})", request_id)
    nbytes = legal_bytes_per_row(a)
    expected = EVAL_HEADER.size + 4 * n * f + n * nbytes
    if len(body) != expected:
        raise ProtocolError(
            Status.MALFORMED,
            f"request body is {len(body)} bytes; N={n}, F={f}, A={a} need {expected}",
            request_id,
        )
    features = np.frombuffer(body, dtype="<f4", count=n * f, offset=EVAL_HEADER.size)
    bits = np.frombuffer(
        body, dtype=np.uint8, count=n * nbytes, offset=EVAL_HEADER.size + 4 * n * f
    )
    legal = unpack_legal(bits.reshape(n, nbytes), a)
    return EvalRequest(request_id, model_id, schema_id, features.reshape(n, f), legal)


def _decode_positions(body: bytes | memoryview) -> PositionRequest:
    header = _check_prefix(body, POSITION_HEADER, "position request")
    _, _, _, request_id, model_id, schema_id, position_schema_id, n, w, a = header
    if n == 0 or w == 0:
        raise ProtocolError(Status.MALFORMED, f"empty position request (N={n}, W={w})", request_id)
    expected = POSITION_HEADER.size + 4 * n * w
    if len(body) != expected:
        raise ProtocolError(
            Status.MALFORMED,
            f"position request body is {len(body)} bytes; N={n}, W={w} need {expected}",
            request_id,
        )
    positions = np.frombuffer(body, "<i4", count=n * w, offset=POSITION_HEADER.size)
    return PositionRequest(
        request_id, model_id, schema_id, position_schema_id, positions.reshape(n, w), a
    )


def decode_reply(body: bytes | memoryview) -> Reply:
    """Parse a reply body (without its length prefix); arrays are read-only views of ``body``.

    An error reply of another protocol version (an older or newer server refusing this
    client's version) is read too: its header layout is the same in every version.

    Raises:
        ProtocolError: MALFORMED or UNSUPPORTED_VERSION when the body is not a valid reply.
    """
    if len(body) >= REPLY_HEADER.size and bytes(body[:2]) == MAGIC and body[2] != PROTOCOL_VERSION:
        _, version, kind, request_id, status, _, _, _ = REPLY_HEADER.unpack_from(body, 0)
        if kind == KIND_REPLY and status != Status.OK:
            text = bytes(body[REPLY_HEADER.size :]).decode("utf-8", "replace")
            try:
                status = Status(status)
            except ValueError:
                status = Status.UNSUPPORTED_VERSION
            message = (
                f"the server speaks protocol version {version}, this client {PROTOCOL_VERSION}"
            )
            return Reply(request_id, status, *_EMPTY, f"{message}: {text}")
    _, _, kind, request_id, status, flags, n, a = _check_prefix(body, REPLY_HEADER, "reply")
    if kind != KIND_REPLY:
        raise ProtocolError(Status.MALFORMED, f"expected a reply, got kind {kind}", request_id)
    heads = 2 if flags & FLAG_MARGINS else 1
    array_bytes = 4 * (n * a + heads * n)
    if len(body) < REPLY_HEADER.size + array_bytes:
        raise ProtocolError(Status.MALFORMED, "reply shorter than its arrays", request_id)
    offset = REPLY_HEADER.size
    logits = np.frombuffer(body, "<f4", count=n * a, offset=offset).reshape(n, a)
    values = np.frombuffer(body, "<f4", count=n, offset=offset + 4 * n * a)
    margins = None
    if flags & FLAG_MARGINS:
        margins = np.frombuffer(body, "<f4", count=n, offset=offset + 4 * (n * a + n))
    try:
        text = bytes(body[offset + array_bytes :]).decode("utf-8")
    except UnicodeDecodeError:
        text = "<reply text is not UTF-8>"
    try:
        status = Status(status)
    except ValueError:
        text, status = f"unknown status {status}: {text}", Status.INTERNAL
    return Reply(request_id, status, logits, values, margins, text)
