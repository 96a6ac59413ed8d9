"""Search as a policy-improvement operator: raw against min-max normalised Q in PUCT.

    python benchmarks/search_quality.py [--games 40] [--sims 64] [--seed 5]

The evaluator is the exact solitaire oracle (``OracleValueEvaluator``) with **uniform priors** and
values of ``score difference / 400`` (so Yatzy move values differ by hundredths, as a trained
network's do): whatever the search gains over uniform play comes from how it uses the values.
Each setting plays ``--games`` paired, side-swapped games against ``greedy`` on the same seeds and
prints its mean score; the last line is the normalised/raw ratio of the searched player's mean.
This measured why ``mcts.normalize_q`` is on by default (docs/reference/search.md).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=40)
    parser.add_argument("--sims", type=int, default=64)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--c-puct", type=float, default=1.0)
    args = parser.parse_args()

    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.registry import make_agent
    from leaguezero.yatzy.oracle.evaluator import OracleValueEvaluator
    from leaguezero.yatzy.oracle.solver import load_oracle
    from leaguezero.yatzy.search.puct import SearchAgent
    from leaguezero.yatzy.search.settings import SearchSettings

    evaluator = OracleValueEvaluator(load_oracle(), value_scale=400.0, priors="uniform")
    greedy = make_agent("greedy")
    means = {}
    for normalize in (False, True):
        mcts = SearchSettings(
            budget_reroll=args.sims, budget_mark=args.sims, c_puct=args.c_puct,
            dirichlet_epsilon=0.0, temperature=0.0, margin_utility=0.0, normalize_q=normalize,
        )  # fmt: skip
        t0 = time.perf_counter()
        result = play_match(SearchAgent(evaluator, mcts), greedy, args.games, seed=args.seed)
        name = "normalised Q" if normalize else "raw Q"
        means[normalize] = float(result.a_scores.mean())
        print(
            f"{name:>12}: search {means[normalize]:6.1f} points, greedy "
            f"{result.b_scores.mean():6.1f}, win rate {result.summary.a_win_rate:.3f} "
            f"({args.games} games, {args.sims} sims, {time.perf_counter() - t0:.1f} s)"
        )
    print(f"normalised / raw mean score: {means[True] / means[False]:.3f}")


if __name__ == "__main__":
    main()
