"""Resident memory of this process, for the training loops' step events (stability checks)."""

from __future__ import annotations

import os

import psutil

_PROCESS = psutil.Process()

# oneDNN, and ideep above it, keep a compiled primitive per operand shape: 1,024 of each by
# default. A bf16 linear's primitive holds its own reordered weight and scratchpad (~3.5 MB for
# SmolLM2's 576 x 1536 projection), and every new prompt length is a new shape, so the caches
# grew without bound in effect: 400 row counts through one such layer kept 1.4 GB, and a SmolLM2
# GRPO run grew from 3.7 GB to 7.1 GB by its eleventh step. 256 keeps a decoding batch's shapes
# (a few rows, reused every step) warm and bounds the rest (benchmarks/native_caches.py).
NATIVE_CACHE_ENTRIES = 256
NATIVE_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def bound_native_caches(entries: int = NATIVE_CACHE_ENTRIES) -> None:
    """Cap oneDNN's and ideep's per-shape caches at ``entries`` unless the environment already
    sets them. Both libraries read the variables when they first build a primitive, so this works
    after ``import torch`` too, and child processes inherit it."""
    for name in NATIVE_CACHE_VARIABLES:
        os.environ.setdefault(name, str(entries))


# glibc gives each new thread its own malloc arena (up to 8 a core) and a freed block goes back to
# the arena it came from, where it stays resident until that arena's top is free. A lockstep
# group of game threads samples an LLM's rows in whichever thread's turn completes the batch,
# so KV caches and activations are spread over a dozen arenas: four concurrent 1-year games of
# pretrained-smol at every seat peaked at 3.32 GB with the default and 2.76 GB with two arenas
# (medians of 3 interleaved pairs, the same CPU: benchmarks/llm_arenas.py; docs/guides/llm.md).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number for the arena limit (malloc.h)


def bound_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` for threads started from now on, unless the
    environment already sets ``MALLOC_ARENA_MAX`` (glibc read it when the process started);
    child processes inherit the cap through the environment. False where there is no glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    if not mallopt(_M_ARENA_MAX, arenas):
        return False
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)
    return True


def release_freed_memory() -> None:
    """Hand memory the process freed back to the system (glibc's ``malloc_trim``; a no-op
    elsewhere). A sampling phase's KV caches, freed in several threads' arenas, otherwise stay
    resident and add to the next phase's peak."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic garbage collector's view (``gc.freeze``):
    a loaded model, its libraries and their modules live as long as the process, and each full
    collection walked them all again; an LLM eval game spent 5% of its CPU in the collector,
    triggered by the tensors a forward pass creates. Objects frozen here that become garbage
    later are still freed by reference counting (only cycles among them stay)."""
    import gc

    gc.collect()
    gc.freeze()


def rss_mb() -> float:
    """This process's resident set size in MiB (one decimal)."""
    return round(_PROCESS.memory_info().rss / 2**20, 1)


def memory_growth(points: list[tuple[int, float]], skip_share: float = 0.1) -> dict | None:
    """RSS over a run's steps, judged after a warm-up: ``points`` are ``(step, rss_mb)``.

    The first ``skip_share`` of the steps are warm-up (imports, allocator pools, the league's
    first checkpoints); growth is the last value minus the value at the end of the warm-up, and
    ``slope_mb_per_1000_steps`` the least-squares slope over the steps after it. None when fewer
    than two points follow the warm-up.
    """
    points = sorted(points)
    if not points:
        return None
    first, last = points[0][0], points[-1][0]
    start = first + skip_share * (last - first)
    after = [(s, m) for s, m in points if s >= start]
    if len(after) < 2:
        return None
    n = len(after)
    mean_s = sum(s for s, _ in after) / n
    mean_m = sum(m for _, m in after) / n
    var = sum((s - mean_s) ** 2 for s, _ in after)
    slope = sum((s - mean_s) * (m - mean_m) for s, m in after) / var if var else 0.0
    return {
        "from_step": after[0][0],
        "to_step": after[-1][0],
        "rss_mb_start": after[0][1],
        "rss_mb_end": after[-1][1],
        "rss_mb_max": max(m for _, m in points),
        "growth_mb": round(after[-1][1] - after[0][1], 1),
        "slope_mb_per_1000_steps": round(slope * 1000, 2),
    }
