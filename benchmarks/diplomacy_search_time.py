"""CPU seconds per movement decision of ``search:CKPT`` against the raw policy (issue 53;
figures in docs/reference/diplomacy.md). Never a pass/fail test.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/diplomacy_search_time.py CKPT`` (a policy file
with a value head): the movement positions of a seeded 3-year dumb_bot game, France and
Russia deciding at each.
"""

from __future__ import annotations

import os
import sys
import time

# As a script, this folder is sys.path[0] and benchmarks/diplomacy.py would shadow the engine.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import torch  # noqa: E402

from leaguezero.diplomacy.agents.policy import load_policy  # noqa: E402
from leaguezero.diplomacy.agents.search import SearchAgent, SearchSettings  # noqa: E402
from leaguezero.diplomacy.game.bots import make_bot  # noqa: E402
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv  # noqa: E402

SEATS = ("FRANCE", "RUSSIA")


def positions(years: int = 3) -> list[DiplomacyEnv]:
    env = DiplomacyEnv(max_years=years)
    bots = {p: make_bot("dumb_bot", seed=i) for i, p in enumerate(POWERS)}
    found = []
    while not env.done:
        if env.phase_type == "M":
            found.append(env.copy())
        for p in POWERS:
            if env.legal_orders(p):
                env.set_orders(p, bots[p].get_orders(env, p))
        env.process()
    return found


def cpu_seconds(player, boards: list[DiplomacyEnv]) -> list[float]:
    times = []
    for env in boards:
        for power in SEATS:
            if env.legal_orders(power):
                started = time.process_time()
                player.get_orders(env, power)
                times.append(time.process_time() - started)
    return times


def main() -> None:
    torch.set_num_threads(1)
    policy = load_policy(sys.argv[1])
    boards = positions()
    raw = cpu_seconds(policy.actor(seed=0), boards)
    print(f"raw policy: {len(raw)} decisions, mean {sum(raw) / len(raw):.4f} s CPU")
    for k, iters, powers in ((4, 64, 2), (8, 64, 2), (8, 64, 1)):
        agent = SearchAgent(policy, SearchSettings(k=k, iters=iters, powers=powers), seed=0)
        times = cpu_seconds(agent, boards)
        mean = sum(times) / len(times)
        print(
            f"search k={k} iters={iters} powers={powers}: {len(times)} decisions, mean "
            f"{mean:.3f} s, max {max(times):.3f} s CPU ({mean / (sum(raw) / len(raw)):.0f}x raw)"
        )


if __name__ == "__main__":
    main()
