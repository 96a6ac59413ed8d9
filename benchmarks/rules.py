"""Rules throughput: numba kernels against the plain-Python reference, in one command.

    python benchmarks/rules.py [--games 20000] [--python-games 300] [--rolls 200000]

Prints random-policy 2-player games/s and ``scores_for_dice`` calls/s for both, and the ratios.
The target for full random games is >= 100x plain Python.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from leaguezero.yatzy import reference, rules
from leaguezero.yatzy.bots import random_playouts


def _rate(fn, n: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=20000)
    parser.add_argument("--python-games", type=int, default=300)
    parser.add_argument("--rolls", type=int, default=200000)
    args = parser.parse_args()

    seeds = np.arange(args.games, dtype=np.int64)
    scores = np.zeros((args.games, 2), dtype=np.int64)
    random_playouts(seeds[:2], rules.DICE_RNG, scores[:2])  # compile outside the timing
    numba_games = _rate(lambda: random_playouts(seeds, rules.DICE_RNG, scores), args.games)
    rng = random.Random(0)
    python_games = _rate(
        lambda: [reference.random_game(rng) for _ in range(args.python_games)], args.python_games
    )

    dice = np.random.default_rng(0).integers(1, 7, size=(args.rolls, 5)).astype(np.int64)
    out = np.zeros((args.rolls, 15), dtype=np.int64)
    rules.scores_for_dice_batch(dice[:2], out[:2])
    numba_scores = _rate(lambda: rules.scores_for_dice_batch(dice, out), args.rolls)
    sample = dice[:20000].tolist()
    python_scores = _rate(lambda: [reference.scores_for_dice(d) for d in sample], len(sample))

    print(f"{'benchmark':<34}{'numba /s':>14}{'python /s':>14}{'ratio':>10}")
    for name, fast, slow in [
        ("random 2-player games", numba_games, python_games),
        ("scores_for_dice (15 categories)", numba_scores, python_scores),
    ]:
        print(f"{name:<34}{fast:>14,.0f}{slow:>14,.0f}{fast / slow:>9.0f}x")
    print(f"mean random-game score: {scores.mean():.1f} (sanity: about 50)")


if __name__ == "__main__":
    main()
