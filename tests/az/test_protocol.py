"""Protocol v1: encode/decode round trips, exact byte layout, and malformed-frame errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from leaguezero.az.inference.protocol import (
    LENGTH,
    ControlOp,
    ControlRequest,
    EvalRequest,
    ProtocolError,
    Status,
    decode_reply,
    decode_request,
    encode_control_request,
    encode_error,
    encode_eval_request,
    encode_reply,
    pack_legal,
    unpack_legal,
)


def _body(frame: bytes) -> bytes:
    (length,) = LENGTH.unpack_from(frame, 0)
    assert length == len(frame) - 4
    return frame[4:]


@pytest.mark.parametrize("n,f,a", [(1, 94, 47), (5, 3, 8), (17, 10, 9), (256, 94, 47)])
def test_eval_request_round_trip(n: int, f: int, a: int) -> None:
    rng = np.random.default_rng(n)
    feats = rng.standard_normal((n, f)).astype(np.float32)
    legal = rng.random((n, a)) < 0.5
    frame = encode_eval_request(2**64 - 3, 7, 1, feats, legal)
    req = decode_request(_body(frame))
    assert isinstance(req, EvalRequest)
    assert (req.request_id, req.model_id, req.feature_schema_id) == (2**64 - 3, 7, 1)
    np.testing.assert_array_equal(req.features, feats)
    np.testing.assert_array_equal(req.legal, legal)


def test_request_byte_layout_is_as_documented() -> None:
    feats = np.array([[1.5, -2.0]], dtype=np.float32)
    legal = np.zeros((1, 10), dtype=bool)
    legal[0, [0, 9]] = True
    frame = encode_eval_request(0x0102, 3, 1, feats, legal)
    expected_body = (
        b"LZ\x03\x01"
        + struct.pack("<QIIIII", 0x0102, 3, 1, 1, 2, 10)
        + struct.pack("<ff", 1.5, -2.0)
        + bytes([0b00000001, 0b00000010])  # action a -> bit a % 8 of byte a // 8
    )
    assert frame == struct.pack("<I", len(expected_body)) + expected_body


def test_pack_unpack_legal_inverse() -> None:
    legal = np.random.default_rng(1).random((33, 47)) < 0.4
    bits = pack_legal(legal)
    assert bits.shape == (33, 6) and bits.dtype == np.uint8
    np.testing.assert_array_equal(unpack_legal(bits, 47), legal)


@pytest.mark.parametrize("with_margins", [False, True])
def test_reply_round_trip(with_margins: bool) -> None:
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, 47)).astype(np.float32)
    logits[0, 3] = -np.inf  # masked logits travel as -inf
    values = rng.uniform(-1, 1, 4).astype(np.float32)
    margins = rng.uniform(-1, 1, 4).astype(np.float32) if with_margins else None
    reply = decode_reply(_body(encode_reply(99, logits, values, margins)))
    assert reply.ok and reply.request_id == 99 and reply.message == ""
    np.testing.assert_array_equal(reply.logits, logits)
    np.testing.assert_array_equal(reply.values, values)
    if with_margins:
        np.testing.assert_array_equal(reply.margins, margins)
    else:
        assert reply.margins is None


def test_error_and_control_round_trip() -> None:
    reply = decode_reply(_body(encode_error(5, Status.UNKNOWN_MODEL, "no model 9 — ids: 0")))
    assert reply.status == Status.UNKNOWN_MODEL and reply.request_id == 5
    assert reply.message == "no model 9 — ids: 0" and reply.logits.shape == (0, 0)
    req = decode_request(_body(encode_control_request(6, ControlOp.LOAD_MODEL, 1, "/x/ü.pt")))
    assert req == ControlRequest(6, ControlOp.LOAD_MODEL, 1, "/x/ü.pt")


def _valid_body() -> bytes:
    return _body(encode_eval_request(11, 0, 1, np.zeros((2, 3), np.float32), np.ones((2, 9), bool)))


@pytest.mark.parametrize(
    "mutate,status,request_id",
    [
        (lambda b: b"XX" + b[2:], Status.MALFORMED, 0),
        (lambda b: b[:2] + b"\x01" + b[3:], Status.UNSUPPORTED_VERSION, 11),  # v1
        (lambda b: b[:3] + b"\x09" + b[4:], Status.MALFORMED, 11),
        (lambda b: b[:-1], Status.MALFORMED, 11),
        (lambda b: b + b"\x00", Status.MALFORMED, 11),
        (lambda b: b[:20], Status.MALFORMED, 11),
        (lambda b: b"", Status.MALFORMED, 0),
        (lambda b: b[:20] + struct.pack("<III", 0, 3, 9), Status.MALFORMED, 11),  # N = 0
    ],
)
def test_malformed_requests_raise_protocol_errors(mutate, status: Status, request_id: int) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(mutate(_valid_body()))
    assert info.value.status == status and info.value.request_id == request_id


def test_truncated_reply_is_malformed() -> None:
    body = _body(encode_reply(1, np.zeros((2, 4), np.float32), np.zeros(2, np.float32)))
    with pytest.raises(ProtocolError, match="shorter"):
        decode_reply(body[:-3])


# ---------------------------------------------------------------------------- endpoints
def test_parse_endpoints() -> None:
    from leaguezero.az.inference.endpoint import Endpoint, parse_endpoint, parse_endpoints

    assert parse_endpoint("unix:///tmp/y.sock") == Endpoint("unix", path="/tmp/y.sock")
    tcp = parse_endpoint("tcp://127.0.0.1:5000")
    assert tcp == Endpoint("tcp", host="127.0.0.1", port=5000) and tcp.is_loopback
    v6 = parse_endpoint("tcp://[::1]:7")
    assert v6.host == "::1" and v6.is_loopback and str(v6) == "tcp://[::1]:7"
    assert not parse_endpoint("tcp://0.0.0.0:1").is_loopback
    assert not parse_endpoint("tcp://gpu-box:1").is_loopback
    many = parse_endpoints("unix:///a.sock, tcp://localhost:9")
    assert [str(e) for e in many] == ["unix:///a.sock", "tcp://localhost:9"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "unix://sub/rel.sock",
        "unix://..",
        "tcp://host",
        "tcp://:80",
        "tcp://h:99999",
        "http://x:1",
    ],
)
def test_bad_endpoints_are_clear(text: str) -> None:
    from leaguezero.az.inference.endpoint import EndpointError, parse_endpoints

    with pytest.raises(EndpointError, match=r"unix:///path/to\.sock or tcp://HOST:PORT"):
        parse_endpoints(text)


def test_client_softmax_of_masked_logits_matches_reference() -> None:
    from leaguezero.az.evaluator import masked_softmax
    from leaguezero.az.inference.client_evaluators import softmax_masked_logits

    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((20, 47)) * 10).astype(np.float32)
    legal = rng.random((20, 47)) < 0.3
    legal[0] = False
    got = softmax_masked_logits(np.where(legal, logits, -np.inf).astype(np.float32))
    np.testing.assert_allclose(got, masked_softmax(logits, legal), atol=1e-6)
    assert np.all(got[0] == 0)
