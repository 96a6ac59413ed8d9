"""Search throughput: ``python benchmarks/search.py`` (one command; figures, never pass/fail).

(a) simulations/s of self-play-like lockstep search over 256 concurrent games with a 2x256 MLP
    in this process, and the share of wall time spent in the network forward (target >= 60%);
(b) the same search through the inference server (``yz infer-server``, a subprocess on a Unix
    socket) vs in-process with the same YatzyNet (target >= 0.7x);
(c) our search vs the object-per-node Python PUCT (``az/reference_puct.py``, one game at a
    time, one leaf per evaluator call) on the same roots and evaluator (target >= 20x).
Every ratio is measured within this run. One torch and one numba thread (shared machines).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np
import torch
from torch import nn

from leaguezero.az.inference.local import masked_softmax_torch
from leaguezero.az.reference_puct import ReferencePUCT
from leaguezero.yatzy.config import MctsSection
from leaguezero.yatzy.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.rules import (
    DICE_RNG,
    STATE_LEN,
    apply_actions_batch,
    new_match,
    new_matches,
    terminal_mask,
)
from leaguezero.yatzy.search import YatzyReferenceGame, make_search
from leaguezero.yatzy.tables import NUM_ACTIONS


class MLP(nn.Module):
    """94 -> 256 -> 256 -> (47 logits + 1 value): the "2x256 MLP" of the targets."""

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, NUM_ACTIONS + 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(self.body(x))
        return out[:, :NUM_ACTIONS], torch.tanh(out[:, NUM_ACTIONS])


class TimedEvaluator:
    """Evaluator over a torch model; ``forward_seconds`` counts only the network forward."""

    feature_schema_id = FEATURE_SCHEMA_ID
    num_actions = NUM_ACTIONS

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        self.forward_seconds = 0.0

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model(torch.from_numpy(features))
            logits, values = out[0], out[1]
            self.forward_seconds += time.perf_counter() - start
            priors = masked_softmax_torch(logits, torch.from_numpy(legal))
        return priors.numpy(), values.numpy().reshape(-1)


def selfplay_decisions(evaluator, games: int, decisions: int, mcts: MctsSection) -> dict:
    """Run ``decisions`` lockstep self-play decisions over ``games`` games; returns figures."""
    search = make_search(evaluator, mcts, max_games=games, seed=1)
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64), DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    done = np.zeros(games, np.bool_)
    rng = np.random.default_rng(0)
    search.run(states[:4], np.arange(4))  # compile outside the timing
    sims = 0
    start = time.perf_counter()
    for _ in range(decisions):
        seeds = rng.integers(0, 2**32, games)
        result = search.run(states, seeds, add_noise=True, temperature=1.0)
        sims += int(result.stats["sims"])
        apply_actions_batch(states, rows, result.actions)
        terminal_mask(states, done)
        for g in np.flatnonzero(done):  # finished games restart (a self-play worker would too)
            new_match(states[g], int(rng.integers(2**40)), DICE_RNG)
    return {"sims": sims, "seconds": time.perf_counter() - start}


def bench_in_process(games: int, decisions: int, mcts: MctsSection) -> None:
    torch.manual_seed(0)
    evaluator = TimedEvaluator(MLP())
    evaluator.evaluate(np.zeros((games, NUM_FEATURES), np.float32), np.ones((games, 47), bool))
    evaluator.forward_seconds = 0.0
    r = selfplay_decisions(evaluator, games, decisions, mcts)
    share = evaluator.forward_seconds / r["seconds"]
    print(
        f"(a) in-process MLP 2x256, {games} games: {r['sims'] / r['seconds']:,.0f} sims/s; "
        f"network forward {100 * share:.0f}% of wall time (target >= 60%)"
    )


def bench_server(games: int, decisions: int, mcts: MctsSection) -> None:
    from leaguezero.az.inference.client import InferenceClient
    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.yatzy.net import build_net

    sock = os.path.join(tempfile.mkdtemp(prefix="lz-bench-"), "infer.sock")
    server = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", "dummy",
         "--bind", f"unix://{sock}", "--metrics-port", "-1", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        client = InferenceClient(
            f"unix://{sock}", feature_schema_id=FEATURE_SCHEMA_ID, num_actions=NUM_ACTIONS
        )
        remote = selfplay_decisions(client, games, decisions, mcts)
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    local = selfplay_decisions(
        TorchEvaluator(build_net(seed=0), FEATURE_SCHEMA_ID), games, decisions, mcts
    )
    remote_rate = remote["sims"] / remote["seconds"]
    local_rate = local["sims"] / local["seconds"]
    print(
        f"(b) YatzyNet (server default), {games} games: socket server {remote_rate:,.0f} sims/s, "
        f"in-process {local_rate:,.0f} sims/s: {remote_rate / local_rate:.2f}x (target >= 0.7x)"
    )


def bench_reference(roots: int, mcts: MctsSection) -> None:
    torch.manual_seed(0)
    evaluator = TimedEvaluator(MLP())
    states = np.zeros((roots, STATE_LEN), np.int64)
    new_matches(states, np.arange(roots, dtype=np.int64) + 1000, DICE_RNG)
    seeds = np.arange(roots, dtype=np.int64)
    search = make_search(evaluator, mcts, max_games=roots)
    search.run(states, seeds)  # compile
    start = time.perf_counter()
    result = search.run(states, seeds)
    ours = result.stats["sims"] / (time.perf_counter() - start)
    reference = ReferencePUCT(
        YatzyReferenceGame(), evaluator, c_puct=mcts.c_puct, normalize_q=mcts.normalize_q
    )  # the same algorithm as ours
    start = time.perf_counter()
    sims = 0
    for g in range(roots):
        reference.search(states[g], int(seeds[g]), mcts.budget_reroll)
        sims += mcts.budget_reroll
    theirs = sims / (time.perf_counter() - start)
    print(
        f"(c) {roots} roots, same MLP: lockstep numba {ours:,.0f} sims/s, object-per-node "
        f"Python {theirs:,.0f} sims/s: {ours / theirs:.1f}x (target >= 20x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=256)
    parser.add_argument("--decisions", type=int, default=6)
    parser.add_argument("--roots", type=int, default=256)
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    mcts = MctsSection()  # budget_reroll 64, budget_mark 32, one leaf in flight per game
    print(f"budgets: reroll {mcts.budget_reroll}, mark {mcts.budget_mark}; torch threads 1")
    bench_in_process(args.games, args.decisions, mcts)
    if not args.skip_server:
        bench_server(args.games, args.decisions, mcts)
    bench_reference(args.roots, mcts)


if __name__ == "__main__":
    main()
