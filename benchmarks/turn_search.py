"""Turn-search throughput: ``python benchmarks/turn_search.py`` (figures, never pass/fail).

Self-play-like lockstep play of ``--games`` games with the turn search (one batched evaluation
of every new turn's successors per round, then the exact in-turn DP per decision), using the
default turn-search network (``BoardTowerNet``, 256 wide) on feature schema 2, in self-play's
forward dtype on both sides (``auto``: bfloat16 on CPUs with native bf16 units), values only
(the net's value path: each distinct board's tower once, no policy head):

(a) in this process (``TorchEvaluator``): decisions/s, successor evaluations/s, and the share
    of wall time in the network forward vs the DP and the rest;
(b) through the inference server (``yz infer-server``, a subprocess on a Unix socket, one
    torch thread) with the same checkpoint: the ratio of decisions/s to in process, over
    ``--pairs`` interleaved (socket, in-process) pairs so that both sides of a ratio share the
    machine's load (target >= 0.8x; ``--request`` A/B-tests the request kind — ``positions``, 9
    int32 a successor that the server encodes (protocol kind 4), or ``features``, 169 float32 —
    and ``--chunk-rows`` the client's chunk size, in the same pairs); and, since a wall-clock
    ratio of two processes that hand work to each other also measures how long each waits for
    a core on a loaded machine, the same ratio in CPU time: in-process CPU seconds per decision
    over the socket path's (this process plus the server's, read from ``/proc/<pid>/stat``;
    Linux only, else left out).

One torch and one numba thread each.

``--quick`` is the CI ratio guard of the socket path (``.ci/run``; about half a minute, exit
status 1 on a failure): 64 games for 30 rounds through the server (positions) and in process,
interleaved five times, each side keeping its least CPU time per decision (client + server
for the socket path; time spent preempted is not counted, so it holds on a busy machine). It
fails below ``MIN_SOCKET_CPU_RATIO`` (in-process CPU / socket CPU), set far below what the code
measures (0.98x in quick mode, 0.83-1.12x in full pairs, load 3-5) so that noise never trips
it: it catches gross regressions of the socket path (per-row Python in the protocol, a lost
encoder or value path on the server), not a few percent — the features request it replaced
measured 0.64-0.83x.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np
import torch

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.az.evaluator import PositionValueEvaluator
from leaguezero.az.inference.local import TorchEvaluator, resolve_dtype
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, apply_actions_batch, new_matches
from leaguezero.yatzy.game.rules import terminal_mask as finished_mask
from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
from leaguezero.yatzy.net.schema import build_network, checkpoint_schema
from leaguezero.yatzy.search.turn import TurnSearch


class Chunked:
    """A client whose ``evaluate_values`` sends chunks of ``rows`` rows (an A/B of chunk sizes),
    as features (the turn search sees no position path here)."""

    def __init__(self, client, rows: int) -> None:
        self.client, self.rows = client, rows
        self.feature_schema_id = client.feature_schema_id
        self.num_actions = client.num_actions
        self.margin_weight = client.margin_weight

    def evaluate(self, features: np.ndarray, legal: np.ndarray):
        return self.client.evaluate(features, legal)

    def evaluate_values(self, features: np.ndarray):
        return self.client.evaluate_values(features, chunk_rows=self.rows)


class ChunkedPositions(Chunked):
    """As :class:`Chunked`, and the turn search sends positions (protocol kind 4)."""

    def evaluate_position_values(self, positions: np.ndarray, position_schema_id: int):
        return self.client.evaluate_position_values(
            positions, position_schema_id, chunk_rows=self.rows
        )


class TimedEvaluator:
    """Wraps an evaluator and counts the seconds spent inside it (values-only calls too, as the
    turn search makes them: both evaluators here offer ``evaluate_values``)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.feature_schema_id = inner.feature_schema_id
        self.num_actions = inner.num_actions
        self.margin_weight = getattr(inner, "margin_weight", 0.0)
        self.seconds = 0.0

    def evaluate(self, features: np.ndarray, legal: np.ndarray):
        t0 = time.perf_counter()
        out = self.inner.evaluate(features, legal)
        self.seconds += time.perf_counter() - t0
        return out

    def evaluate_values(self, features: np.ndarray):
        t0 = time.perf_counter()
        out = self.inner.evaluate_values(features)
        self.seconds += time.perf_counter() - t0
        return out


class TimedPositionEvaluator(TimedEvaluator):
    """:class:`TimedEvaluator` of an evaluator that takes positions (the socket client)."""

    def evaluate_position_values(self, positions: np.ndarray, position_schema_id: int):
        t0 = time.perf_counter()
        out = self.inner.evaluate_position_values(positions, position_schema_id)
        self.seconds += time.perf_counter() - t0
        return out


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None where /proc is absent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def play(evaluator, games: int, rounds: int, seed: int = 0, server_pid: int | None = None) -> dict:
    """``rounds`` lockstep decision rounds over ``games`` games (finished games restart);
    ``cpu_per_decision`` counts this process's CPU time plus ``server_pid``'s when given."""
    by_position = isinstance(evaluator, PositionValueEvaluator)
    timed = (TimedPositionEvaluator if by_position else TimedEvaluator)(evaluator)
    search = TurnSearch(timed)
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + seed * games, DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    done = np.zeros(games, np.bool_)
    search.decide(states, rows)  # warm-up: compiles the kernels
    timed.seconds = 0.0
    search.evaluations = 0
    decisions = 0
    server0 = None if server_pid is None else process_cpu_seconds(server_pid)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for r in range(rounds):
        actions, _, _ = search.decide(states, rows)
        apply_actions_batch(states, rows, actions)
        decisions += games
        finished_mask(states, done)
        if done.any():
            fresh = np.flatnonzero(done)
            sub = states[fresh]
            new_matches(sub, (r + 1) * 1_000_003 + fresh.astype(np.int64), DICE_RNG)
            states[fresh] = sub
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if server0 is not None:
        server1 = process_cpu_seconds(server_pid)
        cpu = None if server1 is None else cpu + server1 - server0
    return {
        "cpu_per_decision": None if cpu is None else cpu / decisions,
        "decisions_per_s": decisions / seconds,
        "evals_per_s": search.evaluations / seconds,
        "network_share": timed.seconds / seconds,
    }


MIN_SOCKET_CPU_RATIO = 0.6  # measured 0.83-1.12 (positions), 0.64-0.83 (features), load 3-5


def start_server(ckpt: str, sock: str, settings: list[str] | None = None) -> subprocess.Popen:
    """``yz infer-server`` on ``unix://sock`` (one torch thread, self-play's dtype, ``--set``
    each of ``settings``), once ready."""
    extra = [arg for item in settings or [] for arg in ("--set", item)]
    server = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "yatzy", "infer-server", "--model", ckpt,
         "--bind", f"unix://{sock}", "--metrics-port", "-1", "--threads", "1",
         "--dtype", "auto", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    for line in server.stdout:
        if line.startswith("listening on"):
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep it drained
            return server
    server.wait(timeout=30)
    raise RuntimeError("the inference server did not start")


def quick_guard(local_eval, ckpt: str, folder: str, repeats: int = 5) -> bool:
    """The CI guard (module docstring): True when the socket path's CPU ratio holds."""
    from leaguezero.az.inference.client import InferenceClient

    server = start_server(ckpt, os.path.join(folder, "quick.sock"))
    best_remote = best_local = float("inf")
    try:
        with InferenceClient(
            f"unix://{folder}/quick.sock", feature_schema_id=TURN_FEATURE_SCHEMA_ID, num_actions=47
        ) as client:
            client.margin_weight = 1.0
            remote_eval = ChunkedPositions(client, 8192)
            for _ in range(repeats):
                remote = play(remote_eval, 64, 30, server_pid=server.pid)
                local = play(local_eval, 64, 30)
                best_remote = min(best_remote, remote["cpu_per_decision"])
                best_local = min(best_local, local["cpu_per_decision"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    ratio = best_local / best_remote
    ok = ratio >= MIN_SOCKET_CPU_RATIO
    print(
        f"turn search quick: socket (positions) {1e6 * best_remote:,.0f} CPU us/decision "
        f"(client + server), in process {1e6 * best_local:,.0f}: {ratio:.2f}x "
        f"(fails below {MIN_SOCKET_CPU_RATIO}x) {'ok' if ok else 'FAILED'}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=90, help="decision rounds (90 = a game)")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved socket/local pairs")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--quick", action="store_true", help="the CI ratio guard only")
    parser.add_argument(
        "--server-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server setting for (b), e.g. infer.forward_on=thread (repeatable)",
    )
    parser.add_argument(
        "--chunk-rows", type=int, nargs="+", default=[8192],
        help="the socket client's values-only chunk size; several: one socket run each per pair",
    )  # fmt: skip
    parser.add_argument(
        "--request", nargs="+", choices=["positions", "features"], default=["positions"],
        help="what the socket client sends; several: one socket run each per pair",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)

    net = build_network(YatzyConfig(), seed=0)  # the default config's turn-search network
    folder = tempfile.mkdtemp(prefix="lz-turn-bench-")
    ckpt = os.path.join(folder, "turn.pt")
    save_checkpoint(ckpt, net, kind=net.kind, kwargs=net.kwargs(), schema=checkpoint_schema("turn"))

    dtype = resolve_dtype("auto")  # self-play's forward dtype, on both sides
    local_eval = TorchEvaluator(net, TURN_FEATURE_SCHEMA_ID, margin_weight=1.0, dtype=dtype)
    if args.quick:
        sys.exit(0 if quick_guard(local_eval, ckpt, folder) else 1)
    local = play(local_eval, args.games, args.rounds)
    print(
        f"(a) in process, {args.games} games: {local['decisions_per_s']:,.0f} decisions/s, "
        f"{local['evals_per_s']:,.0f} successor evaluations/s; network forward "
        f"{100 * local['network_share']:.0f}% of wall time (DP, encoding and the rest: "
        f"{100 * (1 - local['network_share']):.0f}%)"
    )
    if args.skip_server:
        return
    from leaguezero.az.inference.client import InferenceClient

    sock = os.path.join(folder, "infer.sock")
    server = start_server(ckpt, sock, args.server_set)
    variants = [(kind, rows) for kind in args.request for rows in args.chunk_rows]
    wrappers = {"positions": ChunkedPositions, "features": Chunked}
    ratios = {v: [] for v in variants}
    cpu_ratios = {v: [] for v in variants}
    last = {}
    try:
        client = InferenceClient(
            f"unix://{sock}", feature_schema_id=TURN_FEATURE_SCHEMA_ID, num_actions=47
        )
        client.margin_weight = 1.0
        # Interleaved pairs, so that both sides of each ratio see the same load.
        for _ in range(args.pairs):
            remotes = {
                (kind, rows): play(
                    wrappers[kind](client, rows), args.games, args.rounds, server_pid=server.pid
                )
                for kind, rows in variants
            }
            local = play(local_eval, args.games, args.rounds)
            for v, remote in remotes.items():
                ratios[v].append(remote["decisions_per_s"] / local["decisions_per_s"])
                if remote["cpu_per_decision"] is not None:
                    cpu_ratios[v].append(local["cpu_per_decision"] / remote["cpu_per_decision"])
                last[v] = (remote, local)
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for v in variants:
        kind, rows = v
        remote, local = last[v]
        wall, cpu = sorted(ratios[v]), sorted(cpu_ratios[v])
        print(
            f"(b) through yz infer-server (Unix socket, {kind}, chunks of {rows} rows) vs in "
            "process, "
            f"{args.pairs} interleaved pairs: {' / '.join(f'{r:.2f}' for r in wall)}x, median "
            f"{wall[len(wall) // 2]:.2f}x (target >= 0.8x; last pair "
            f"{remote['decisions_per_s']:,.0f} vs {local['decisions_per_s']:,.0f} decisions/s)"
        )
        if cpu:
            print(
                f"    in CPU time (in-process CPU per decision / socket client + server CPU), "
                f"same pairs: {' / '.join(f'{r:.2f}' for r in cpu)}x, median "
                f"{cpu[len(cpu) // 2]:.2f}x (last pair {1e6 * remote['cpu_per_decision']:,.0f} vs "
                f"{1e6 * local['cpu_per_decision']:,.0f} CPU us/decision)"
            )


if __name__ == "__main__":
    main()
