"""Optimal solitaire games/s: our numba oracle agent against yatzy-solver's own ``simulate``.

    python benchmarks/oracle.py [--games 20000] [--threads 1] [--repeats 3]

Both play the same optimal policy from the same solved table, on the same number of threads
(``RAYON_NUM_THREADS`` for the solver, numba threads for us, set before either starts). The
timings alternate and the best of ``--repeats`` is kept, so other load on the machine hurts both
alike. Also prints the agent's speed through the 2-player ``act`` path (``play_match``) for
reference. The target is >= 3x the solver's games/s.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--match-games", type=int, default=2000)
    args = parser.parse_args()
    # Thread pools read these when they start: set them before importing numba or the solver.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)

    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.oracle import OracleAgent, simulate
    from leaguezero.yatzy.oracle.solver import load_oracle

    oracle = load_oracle()
    simulate(oracle, 100, seed=0)  # compile (or load the numba cache) outside the timing
    oracle.solver.simulate(100, seed=0)

    ours, theirs = float("inf"), float("inf")
    our_mean = their_mean = 0.0
    for r in range(args.repeats):
        t0 = time.perf_counter()
        stats = simulate(oracle, args.games, seed=r)
        ours = min(ours, time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = oracle.solver.simulate(args.games, seed=r)
        theirs = min(theirs, time.perf_counter() - t0)
        our_mean, their_mean = stats.mean, float(result["mean"])

    agent = OracleAgent(oracle=oracle)
    play_match(agent, agent, 2, seed=0)
    t0 = time.perf_counter()
    play_match(agent, agent, args.match_games, seed=1)
    match_rate = args.match_games / (time.perf_counter() - t0)

    print(f"threads {args.threads}, {args.games} games, best of {args.repeats}")
    rows = (
        ("yatzy-solver simulate", args.games / theirs, their_mean),
        ("leaguezero oracle (numba)", args.games / ours, our_mean),
    )
    for label, rate, mean in rows:
        print(f"  {label:27s}{rate:10,.0f} games/s  (mean {mean:.2f})")
    print(f"  {'ratio':27s}{theirs / ours:10.2f}x  (target >= 3x)")
    print(
        f"  2-player oracle-vs-oracle via act(): {match_rate:,.0f} games/s "
        f"({2 * match_rate:,.0f} solitaire boards/s)"
    )


if __name__ == "__main__":
    main()
