"""Bot-game throughput of our rollout against the bare engine fed the same orders.

    python benchmarks/diplomacy.py [--games 7] [--max-years 10] [--repeats 3] [--seed 0]
    python -m benchmarks.diplomacy ...   (the same)

1. **ours**: ``run_rollout`` with bots on every seat (greedy, chaos and random mixed; no saving,
   no observations), which records every phase's submitted orders.
2. **bare engine loop**: a plain ``diplomacy.Game`` fed exactly those orders
   (``set_orders`` with the engine's defaults, ``process``; ``draw()`` where we capped), as
   anyone would drive the engine with precomputed orders. Its final board is checked against
   ours, so both loops play the same games.
3. For context, two more engine-only loops on the same orders: with ``expand=False`` (the
   engine's fast path, which our wrapper uses) and with ``get_all_possible_orders()`` once per
   phase (the engine work any bot needs to know its legal orders).

Each loop is timed in CPU seconds of this (single-threaded) process, which other processes on a
shared machine disturb far less than wall time, ``--repeats`` times, interleaved; the best time
is kept. Prints phases per second, the ratio ours / bare (our overhead = ratio - 1) and where
our time goes: engine set/process, engine legal-order generation, and our own code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# Run as a script, this file's folder is sys.path[0] and this file would shadow the `diplomacy`
# engine package it benchmarks; drop that folder before importing the engine.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from diplomacy import Game  # noqa: E402

from leaguezero.diplomacy.config import DiplomacyConfig  # noqa: E402
from leaguezero.diplomacy.game.env import MAP_NAME, POWERS  # noqa: E402
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout  # noqa: E402

SEAT_CYCLE = ("greedy_bot", "random_bot", "chaos_bot", "random_bot")


def seating(game_idx: int) -> dict[str, str]:
    """A mixed table, rotated per game so every bot plays every power."""
    return {power: SEAT_CYCLE[(i + game_idx) % len(SEAT_CYCLE)] for i, power in enumerate(POWERS)}


def play_ours(cfg: DiplomacyConfig, games: int) -> tuple[float, list[RolloutResult]]:
    started = time.process_time()
    results = [run_rollout(cfg, 0, g, seating(g), POWERS[g % len(POWERS)]) for g in range(games)]
    return time.process_time() - started, results


def replay_bare(
    results: list[RolloutResult], *, expand: bool = True, legal_orders: bool = False
) -> tuple[float, list[dict[str, int]]]:
    """Feed each game's recorded orders to a bare Game; returns (seconds, final centre counts)."""
    finals = []
    started = time.process_time()
    for result in results:
        game = Game(map_name=MAP_NAME)
        for phase in result.order_history:
            if legal_orders:
                game.get_orderable_locations()
                game.get_all_possible_orders()
            for power, orders in phase["orders"].items():
                game.set_orders(power, orders, expand=expand)
            game.process()
        if result.ended_by == "max_years":
            game.draw()
        finals.append({p: len(game.powers[p].centers) for p in POWERS})
    return time.process_time() - started, finals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=7)
    parser.add_argument("--max-years", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = DiplomacyConfig(
        seed=args.seed, max_years=args.max_years, games_dir=None, record_observations=False
    )
    Game(map_name=MAP_NAME)  # load the map once, outside every timing

    best = {"ours": float("inf"), "bare": float("inf"), "fast": float("inf"), "legal": float("inf")}
    results: list[RolloutResult] = []
    for _ in range(args.repeats):
        seconds, results = play_ours(cfg, args.games)
        best["ours"] = min(best["ours"], seconds)
        seconds, finals = replay_bare(results)
        best["bare"] = min(best["bare"], seconds)
        if finals != [r.centers for r in results]:
            raise SystemExit("the bare replay reached another board: the loops are not comparable")
        best["fast"] = min(best["fast"], replay_bare(results, expand=False)[0])
        best["legal"] = min(best["legal"], replay_bare(results, legal_orders=True)[0])

    phases = sum(len(r.order_history) for r in results)
    print(
        f"{args.games} games, {phases} phases, max_years {args.max_years}, best of {args.repeats}"
    )
    labels = {
        "ours": "ours: run_rollout with bots",
        "bare": "bare engine loop, same orders",
        "fast": "bare loop, set_orders(expand=False)",
        "legal": "bare loop + get_all_possible_orders",
    }
    for key, label in labels.items():
        print(f"  {label:38s} {best[key]:7.3f} s  {phases / best[key]:8.1f} phases/s")
    ratio = best["ours"] / best["bare"]
    print(f"ratio ours / bare engine loop: {ratio:.3f}  (overhead {100 * (ratio - 1):+.1f}%)")
    # Where our time goes: the engine's fast set_orders + process, the engine's legal-order
    # generation (which any bot needs and the replay does not), and our own Python (bots,
    # validation, bookkeeping) as the remainder.
    legal_cost = best["legal"] - best["bare"]
    own_code = best["ours"] - best["fast"] - legal_cost
    print(
        f"ours = engine set/process {best['fast']:.3f} s + engine legal orders "
        f"{legal_cost:.3f} s + our code {own_code:.3f} s "
        f"({100 * own_code / best['bare']:+.1f}% of the bare loop)"
    )


if __name__ == "__main__":
    main()
