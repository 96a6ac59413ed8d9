"""Our search vs DeepMind's mctx, side by side on one core: ``python benchmarks/mctx_compare.py``.

Needs the optional ``bench`` extra (``pip install -e ".[bench]"``: CPU jax and mctx); without
JAX it says so and exits 0. Figures, never pass/fail.

Both sides: B = 256 roots, 64 simulations each, a tiny MLP 94 -> 128 -> 48 (47 policy logits and
one value) with the same shapes, one CPU thread (torch and numba here, XLA's CPU client there).

What each searches (they are not the same problem, so the ratio is of throughput, not of
equal work):

* ours: PUCT with closed-loop chance over the real Yatzy rules (numba), one batched torch call
  per round for all 256 games, legal masks, sampled dice outcomes, terminal values;
* mctx ``muzero_policy`` / ``gumbel_muzero_policy``: a deterministic learned-model tree
  (``recurrent_fn`` = the same MLP applied to a cheap embedding update, no rules, no chance, no
  legal mask), the whole search jit-compiled by XLA, batched over the 256 roots; Gumbel
  MuZero uses sequential halving at the root (16 considered actions).

Targets (issue 17): ours >= 2x ``gumbel_muzero_policy`` and >= 5x ``muzero_policy``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import numpy as np
import torch
from torch import nn

from leaguezero.az.inference.local import masked_softmax_torch
from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID, NUM_FEATURES
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, new_matches
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.search.puct import make_search
from leaguezero.yatzy.search.settings import SearchSettings

HIDDEN = 128
BATCH = 256
SIMS = 64


class TinyMLP(nn.Module):
    """94 -> 128 -> (47 logits + 1 value)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(NUM_FEATURES, HIDDEN), nn.ReLU())
        self.head = nn.Linear(HIDDEN, NUM_ACTIONS + 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(self.body(x))
        return out[:, :NUM_ACTIONS], torch.tanh(out[:, NUM_ACTIONS])


class TinyEvaluator:
    feature_schema_id = FEATURE_SCHEMA_ID
    num_actions = NUM_ACTIONS

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()

    def evaluate(self, features: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            logits, values = self.model(torch.from_numpy(features))
            priors = masked_softmax_torch(logits, torch.from_numpy(legal))
        return priors.numpy(), values.numpy().reshape(-1)


def ours_rate(repeats: int) -> float:
    torch.manual_seed(0)
    mcts = SearchSettings(budget_reroll=SIMS, budget_mark=SIMS)
    search = make_search(TinyEvaluator(TinyMLP()), mcts, max_games=BATCH, seed=1)
    states = np.zeros((BATCH, STATE_LEN), np.int64)
    new_matches(states, np.arange(BATCH, dtype=np.int64), DICE_RNG)
    search.run(states, np.arange(BATCH))  # compile
    best = 0.0
    for i in range(repeats):
        start = time.perf_counter()
        result = search.run(states, np.arange(BATCH) + i)
        best = max(best, result.stats["sims"] / (time.perf_counter() - start))
    return best


def mctx_rates(repeats: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import mctx

    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4, key = jax.random.split(key, 5)
    params = {
        "w1": jax.random.normal(k1, (NUM_FEATURES, HIDDEN)) / np.sqrt(NUM_FEATURES),
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, NUM_ACTIONS + 1)) / np.sqrt(HIDDEN),
        "b2": jnp.zeros(NUM_ACTIONS + 1),
        # A cheap deterministic "dynamics": the embedding moves by an action-dependent vector.
        "step": jax.random.normal(k3, (NUM_ACTIONS, NUM_FEATURES)) * 0.1,
    }

    def net(params, embedding):
        hidden = jax.nn.relu(embedding @ params["w1"] + params["b1"])
        out = hidden @ params["w2"] + params["b2"]
        return out[:, :NUM_ACTIONS], jnp.tanh(out[:, NUM_ACTIONS])

    def recurrent_fn(params, rng, action, embedding):
        del rng
        next_embedding = jnp.tanh(embedding + params["step"][action])
        logits, value = net(params, next_embedding)
        output = mctx.RecurrentFnOutput(
            reward=jnp.zeros(action.shape[0]),
            discount=-jnp.ones(action.shape[0]),  # two players: the value flips sign
            prior_logits=logits,
            value=value,
        )
        return output, next_embedding

    embedding = jax.random.uniform(k4, (BATCH, NUM_FEATURES))

    def make(policy):
        def run(params, rng, embedding):
            logits, value = net(params, embedding)
            root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=embedding)
            return policy(
                params=params, rng_key=rng, root=root, recurrent_fn=recurrent_fn,
                num_simulations=SIMS,
            ).action  # fmt: skip

        return jax.jit(run)

    rates = {}
    for name, policy in [
        ("muzero_policy", mctx.muzero_policy),
        ("gumbel_muzero_policy", mctx.gumbel_muzero_policy),
    ]:
        fn = make(policy)
        fn(params, key, embedding).block_until_ready()  # compile
        best = 0.0
        for i in range(repeats):
            start = time.perf_counter()
            fn(params, jax.random.fold_in(key, i), embedding).block_until_ready()
            best = max(best, BATCH * SIMS / (time.perf_counter() - start))
        rates[name] = best
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="best of this many searches")
    args = parser.parse_args()
    try:
        import jax  # noqa: F401
        import mctx  # noqa: F401
    except ImportError:
        print("JAX/mctx not installed (pip install -e '.[bench]'): skipping the mctx comparison")
        sys.exit(0)
    torch.set_num_threads(1)
    ours = ours_rate(args.repeats)
    theirs = mctx_rates(args.repeats)
    print(f"B={BATCH}, {SIMS} simulations, MLP 94->{HIDDEN}->48, one thread each")
    print(f"ours (PUCT + chance over the Yatzy rules, numba + torch): {ours:,.0f} sims/s")
    for name, target in [("gumbel_muzero_policy", 2.0), ("muzero_policy", 5.0)]:
        print(
            f"mctx {name} (deterministic learned model, XLA): {theirs[name]:,.0f} sims/s; "
            f"ours {ours / theirs[name]:.2f}x (target >= {target:.0f}x)"
        )


if __name__ == "__main__":
    main()
