"""The turn search through a real inference server process gives the in-process answers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.inference.client import InferenceClient
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, apply_actions_batch, new_matches
from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.networks import build_net
from leaguezero.yatzy.net.schema import checkpoint_schema, num_features
from leaguezero.yatzy.search.turn import PIPELINE_CHUNK, TurnSearch


@pytest.fixture(params=["resmlp", "board_towers"])
def served(tmp_path, request):
    # The residual MLP answers values-only requests with its plain forward; the board-tower
    # net with its value path (each board's tower once). float32: the answers must match.
    arch = request.param
    net = build_net(hidden=32, blocks=1, seed=4, num_features=num_features("turn"), arch=arch)
    ckpt = tmp_path / "turn.pt"
    schema = checkpoint_schema("turn")
    save_checkpoint(ckpt, net, kind=net.kind, kwargs=net.kwargs(), schema=schema)
    sock = tmp_path / "infer.sock"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", str(ckpt),
         "--bind", f"unix://{sock}", "--metrics-port", "-1", "--threads", "1",
         "--dtype", "float32"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if re.match(r"listening on (\S+)", line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            break
    else:
        proc.wait(timeout=30)
        raise AssertionError("server did not start:\n" + "".join(lines))
    try:
        yield net, f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_turn_search_over_the_socket_matches_in_process(served) -> None:
    net, address = served
    local = TurnSearch(TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0))
    client = InferenceClient(address, feature_schema_id=TURN_FEATURE_SCHEMA_ID, num_actions=47)
    client.margin_weight = 1.0
    remote = TurnSearch(client)
    games = 24  # 24 x ~100 successors per turn
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64), DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    agree = total = 0
    try:
        for _ in range(12):  # 12 decision rounds: about four turns per game
            a_local, v_local, t_local = local.decide(states, rows)
            a_remote, v_remote, t_remote = remote.decide(states, rows)
            np.testing.assert_allclose(v_remote, v_local, atol=1e-5)
            np.testing.assert_allclose(t_remote, t_local, atol=1e-5)
            agree += int((a_local == a_remote).sum())
            total += games
            apply_actions_batch(states, rows, a_local)
        # Values-only calls cut into many chunks (several in flight) come back in row order.
        x = np.random.default_rng(5).random((300, num_features("turn")), dtype=np.float32)
        np.testing.assert_allclose(
            client.evaluate_values(x, chunk_rows=37), local.evaluator.evaluate_values(x), atol=1e-5
        )
    finally:
        client.close()
    assert agree == total
    assert remote.evaluations == local.evaluations > PIPELINE_CHUNK
