"""``yz profile selfplay``: self-play under cProfile plus a torch.profiler trace of the net.

Writes into ``RUN/profile/``:

* ``selfplay.prof`` — cProfile data (open with ``snakeviz`` or ``python -m pstats``);
* ``selfplay_top.txt`` — the 40 most expensive functions by cumulative time;
* ``torch_trace.json`` — a Chrome trace of network forwards (chrome://tracing or Perfetto);
* ``torch_ops.txt`` — torch operators by self CPU time;
* ``summary.json`` — where the wall time went: evaluator (network) share vs search.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import tempfile
from pathlib import Path

import numpy as np

from leaguezero.common.atomic import atomic_write_json, atomic_write_text
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.search.settings import SearchSettings


def profile_selfplay(
    cfg: YatzyConfig, settings: SearchSettings, evaluator, out_dir: Path, games: int, seed: int
) -> dict:
    """Profile ``games`` self-play games (of ``cfg.search.kind``, searching with ``settings``)
    with ``evaluator``; returns the summary dict."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from leaguezero.az.inference.local import TorchEvaluator
    from leaguezero.yatzy.train.kinds import selfplay_function

    run_selfplay = selfplay_function(cfg.search.kind)

    out_dir.mkdir(parents=True, exist_ok=True)
    # Warm-up outside the profile: numba compiles (or loads its cache) on first use.
    with tempfile.TemporaryDirectory() as tmp:
        run_selfplay(cfg, evaluator, tmp, settings=settings, games=min(games, 2), seed=seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        profiler = cProfile.Profile()
        profiler.enable()
        stats = run_selfplay(cfg, evaluator, tmp, settings=settings, games=games, seed=seed)
        profiler.disable()
    profiler.dump_stats(out_dir / "selfplay.prof")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    atomic_write_text(out_dir / "selfplay_top.txt", text.getvalue())

    torch_summary = {}
    if isinstance(evaluator, TorchEvaluator):  # an in-process network: profile its forward
        model = evaluator.model
        n = cfg.selfplay.concurrent_games
        x = torch.from_numpy(np.random.default_rng(0).random((n, model.num_features), np.float32))
        with (
            profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof,
            torch.inference_mode(),
        ):
            for _ in range(20):
                model(x)
        prof.export_chrome_trace(str(out_dir / "torch_trace.json"))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        atomic_write_text(out_dir / "torch_ops.txt", table)
        torch_summary = {"torch_batch": n, "torch_forwards": 20}
    summary = {
        **stats.to_dict(),
        "network_share": stats.evaluate_seconds / max(stats.seconds, 1e-9),
        "search_share": 1 - stats.evaluate_seconds / max(stats.seconds, 1e-9),
        **torch_summary,
        "files": sorted(p.name for p in out_dir.iterdir()),
    }
    atomic_write_json(out_dir / "summary.json", summary)
    return summary
