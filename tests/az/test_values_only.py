"""Values-only requests (A = 0): the reply carries values and margins, no logits."""

from __future__ import annotations

import numpy as np
import torch

from leaguezero.az.inference.local import forward_numpy
from leaguezero.az.inference.protocol import (
    decode_reply,
    decode_request,
    encode_eval_request,
)
from leaguezero.az.inference.replies import forward_and_encode
from leaguezero.az.inference.server import ServedModel
from leaguezero.yatzy.net.networks import build_net


def request(rid: int, features: np.ndarray, actions: int):
    legal = np.ones((len(features), actions), np.bool_)
    return decode_request(encode_eval_request(rid, 0, 2, features, legal)[4:])


def test_a_mixed_batch_answers_each_request_in_its_kind() -> None:
    net = build_net(arch="board_towers", hidden=32, seed=3, num_features=169)
    served = ServedModel(net, 2, "test")
    x = np.random.default_rng(0).random((10, 169), dtype=np.float32)
    full, values_only = request(1, x[:4], 47), request(2, x[4:], 0)
    assert values_only.legal.shape == (6, 0)
    frames = forward_and_encode(served.model, [full, values_only], torch.device("cpu"),
                                served.value_function)  # fmt: skip
    a, b = (decode_reply(frame[4:]) for frame in frames)
    expected = forward_numpy(net, x)
    assert a.logits.shape == (4, 47) and b.logits.shape == (6, 0)
    np.testing.assert_allclose(a.values, expected.values[:4], atol=1e-6)
    np.testing.assert_allclose(b.values, expected.values[4:], atol=1e-6)
    np.testing.assert_allclose(b.margins, expected.margins[4:], atol=1e-6)


def test_a_bfloat16_server_is_close_to_float32() -> None:
    net = build_net(arch="resmlp", hidden=32, seed=3, num_features=169)
    x = np.random.default_rng(1).random((5, 169), dtype=np.float32)
    expected = forward_numpy(net, x)
    served = ServedModel(build_net(arch="resmlp", hidden=32, seed=3, num_features=169), 2, "t",
                         dtype=torch.bfloat16)  # fmt: skip
    assert served.describe()["dtype"] == "bfloat16" and served.value_function is None
    (frame,) = forward_and_encode(served.model, [request(1, x, 0)], torch.device("cpu"))
    got = decode_reply(frame[4:])
    np.testing.assert_allclose(got.values, expected.values, atol=3e-2)
