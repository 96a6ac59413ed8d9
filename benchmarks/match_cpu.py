"""CPU time of a match, this code against another checkout (figures, never pass/fail).

``python benchmarks/match_cpu.py --baseline-src DIR`` plays ``yz match --a A --b B`` (default:
the shipped ``pretrained``, two turns deep, against the exact ``oracle``) over ``--games``
paired games (default 200) on one seed, once with this checkout's ``src`` and once with
``DIR/src`` (e.g. ``git archive HEAD | tar -x -C /tmp/base``), each in a fresh subprocess
pinned to one core (``taskset -c 0`` when available) with one torch and one numba thread, as
``--pairs`` interleaved pairs (new, baseline, new, baseline, ...) so both sides of each ratio
share the machine's load. Each child reports its own CPU time (``time.process_time``) for the
match after a 4-game warm-up that loads the network and compiles the kernels; the ratio is
baseline CPU time ÷ new. Both sides must play the same games: each line says whether their
wins and points agree (a change of float rounding may flip a near tie now and then; a change
of play would show in every pair).

``--latency N`` measures instead how long A takes to decide for a single game: each child
plays N pairs one at a time (two side-swapped games in lockstep, A to move in one of them at a
time) and times every call of A's ``act`` in CPU time; it prints the median and the slowest
call of each side (the issue's bar for ``pretrained``: under a second a decision on one core).
"""

from __future__ import annotations

import argparse
from pathlib import Path

# Run as a script, this folder is on sys.path: the pinned child runner is selfplay_cpu's.
from selfplay_cpu import baseline_src, run_pinned_child

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from leaguezero.yatzy.agents.match import play_match
from leaguezero.yatzy.agents.registry import make_agent

a_name, b_name, games, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
latency = int(sys.argv[5])
a, b = make_agent(a_name), make_agent(b_name)
play_match(a, b, 4, seed + 1)
if latency:
    calls = []
    act = a.act
    def timed(states, rows):
        t0 = time.process_time()
        out = act(states, rows)
        calls.append(time.process_time() - t0)
        return out
    a.act = timed
    for k in range(latency):
        play_match(a, b, 2, seed + 2 + k)
    calls.sort()
    print(json.dumps({"calls": len(calls), "median": calls[len(calls) // 2], "max": calls[-1]}))
    sys.exit(0)
t0 = time.process_time()
s = play_match(a, b, games, seed).summary
cpu = time.process_time() - t0
print(json.dumps({"cpu_seconds": cpu, "games": s.games, "a_wins": s.a_wins,
                  "score_diff_mean": s.score_diff_mean}))
"""


def run_child(src: Path, args: argparse.Namespace) -> dict:
    """One match with the code under ``src``; its JSON line."""
    argv = [args.a, args.b, str(args.games), str(args.seed), str(args.latency)]
    return run_pinned_child(src, CHILD, argv, "the match")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, required=True, help="the other checkout")
    parser.add_argument("--a", default="pretrained", help="agent A (default: two turns deep)")
    parser.add_argument("--b", default="oracle")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--latency", type=int, default=0, help="single-game pairs per child")
    args = parser.parse_args()
    baseline = baseline_src(args.baseline_src)
    if args.latency:
        for pair in range(args.pairs):
            for label, src in (("this code", HERE / "src"), ("baseline", baseline)):
                r = run_child(src, args)
                print(
                    f"pair {pair}, {label}: {r['calls']} decisions of {args.a} for one game, "
                    f"CPU-s median {r['median']:.4f}, slowest {r['max']:.3f}",
                    flush=True,
                )
        return
    ratios = []
    for pair in range(args.pairs):
        new = run_child(HERE / "src", args)
        old = run_child(baseline, args)
        ratio = old["cpu_seconds"] / new["cpu_seconds"]
        ratios.append(ratio)
        same = (new["a_wins"], new["score_diff_mean"]) == (old["a_wins"], old["score_diff_mean"])
        diffs = f"{new['score_diff_mean']:+.3f} vs {old['score_diff_mean']:+.3f}"
        print(
            f"pair {pair}: this code {new['cpu_seconds'] / new['games']:.3f} CPU-s a game, "
            f"baseline {old['cpu_seconds'] / old['games']:.3f}: {ratio:.2f}x; "
            f"{'the same games' if same else 'RESULTS DIFFER'} (A won {new['a_wins']} vs "
            f"{old['a_wins']}, points a game {diffs})",
            flush=True,
        )
    ratios.sort()
    print(
        f"{args.a} vs {args.b}, CPU time baseline / this code, {args.pairs} interleaved pairs: "
        f"min {ratios[0]:.2f} / median {ratios[len(ratios) // 2]:.2f} / max {ratios[-1]:.2f}x"
    )


if __name__ == "__main__":
    main()
