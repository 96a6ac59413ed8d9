"""``yz bench``: micro-benchmarks of the hot paths (scoring, legal masks, PUCT, protocol).

Each entry times a batched kernel call repeatedly for about ``--seconds`` and reports the rate
per item. Figures, not tests: they vary with the machine and with whatever else runs on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated

import numpy as np
import typer

from leaguezero.common.cli import fail

BATCH = 256  # items per timed call (one lockstep batch)


def _rate(run: Callable[[], int], seconds: float) -> tuple[float, int]:
    """Call ``run`` (returns items done) until ``seconds`` pass; (items per second, calls)."""
    run()  # compile / warm up outside the timing
    items = calls = 0
    start = time.perf_counter()
    while True:
        items += run()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return items / elapsed, calls


def _random_states(n: int, seed: int) -> np.ndarray:
    from leaguezero.yatzy.agents.bots import random_actions
    from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, apply_actions_batch, new_matches

    states = np.zeros((n, STATE_LEN), np.int64)
    new_matches(states, np.arange(n, dtype=np.int64) + seed, DICE_RNG)
    rng_state = np.array([seed], np.int64)
    actions = np.zeros(n, np.int64)
    rows = np.arange(n, dtype=np.int64)
    for _ in range(20):  # a little random play, so the states are not all openings
        random_actions(states, rows, rng_state, actions)
        apply_actions_batch(states, rows, actions)
    return states


def bench_scoring(seconds: float) -> tuple[float, int]:
    from leaguezero.yatzy.game.rules import scores_for_dice_batch

    dice = np.random.default_rng(0).integers(1, 7, (BATCH, 5))
    out = np.zeros((BATCH, 15), np.int64)
    return _rate(lambda: scores_for_dice_batch(dice, out) or BATCH, seconds)


def bench_legal(seconds: float) -> tuple[float, int]:
    from numba import njit

    from leaguezero.yatzy.game.rules import legal_mask

    @njit  # a closure: not cacheable, compiled once per process
    def legal_batch(states, out):
        for g in range(states.shape[0]):
            legal_mask(states[g], out[g])

    states = _random_states(BATCH, 1)
    out = np.zeros((BATCH, 47), np.bool_)
    return _rate(lambda: legal_batch(states, out) or BATCH, seconds)


def bench_puct(seconds: float) -> tuple[float, int]:
    """Lockstep select + expand/backup with a free (uniform) evaluator: search cost alone."""
    from leaguezero.az.evaluator import UniformEvaluator
    from leaguezero.yatzy.search.puct import make_search
    from leaguezero.yatzy.search.settings import SearchSettings

    states = _random_states(BATCH, 2)
    search = make_search(UniformEvaluator(1, 47), SearchSettings(), max_games=BATCH)
    seeds = np.arange(BATCH, dtype=np.int64)
    return _rate(lambda: int(search.run(states, seeds).stats["sims"]), seconds)


def bench_protocol(seconds: float) -> tuple[float, int]:
    """Encode + decode one EVAL_REQUEST of a lockstep batch (rows per second)."""
    from leaguezero.az.inference.protocol import LENGTH, decode_request, encode_eval_request

    features = np.random.default_rng(3).random((BATCH, 94), np.float32)
    legal = np.random.default_rng(4).random((BATCH, 47)) < 0.5

    def run() -> int:
        frame = encode_eval_request(7, 0, 1, features, legal)
        decode_request(memoryview(frame)[LENGTH.size :])
        return BATCH

    return _rate(run, seconds)


app = typer.Typer()  # mounted flat by the yz app

ENTRIES: dict[str, tuple[str, Callable[[float], tuple[float, int]]]] = {
    "scoring": ("rolls scored in 15 categories", bench_scoring),
    "legal": ("legal masks", bench_legal),
    "puct": ("PUCT simulations (select + expand/backup, uniform evaluator)", bench_puct),
    "protocol": ("protocol v3 request rows encoded + decoded", bench_protocol),
}


@app.command("bench")
def bench(
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help=f"Entries to run (repeatable): {', '.join(ENTRIES)}."),
    ] = None,
    seconds: Annotated[float, typer.Option(help="Seconds per entry.", min=0.05)] = 1.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Micro-benchmarks of scoring, legal masks, PUCT select/backup and protocol codec."""
    names = only or list(ENTRIES)
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        raise fail(f"unknown bench entry {unknown[0]!r}: use one of {', '.join(ENTRIES)}")
    results = {}
    for name in names:
        what, fn = ENTRIES[name]
        rate, calls = fn(seconds)
        results[name] = {"per_second": rate, "us_per_item": 1e6 / rate, "calls": calls}
        if not json_out:
            typer.echo(f"{name:>9}  {rate:>14,.0f} /s  {1e6 / rate:9.3f} us  {what}")
    if json_out:
        typer.echo(json.dumps(results))
