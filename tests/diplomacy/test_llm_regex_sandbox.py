"""The bounded compile workers of ``llm serve``
(:mod:`leaguezero.diplomacy.llm.serve.regex_sandbox`), on a 256-byte vocabulary: the memory
bound, invalid expressions, and the cache's two bounds."""

from __future__ import annotations

import pytest

pytest.importorskip("outlines_core")

from outlines_core import Vocabulary

from leaguezero.diplomacy.llm.serve.regex_sandbox import CompileLimits, RegexRefused, RegexSandbox


def sandbox(**limits) -> RegexSandbox:
    vocabulary = Vocabulary(256, {bytes([b]): [b] for b in range(256)})
    return RegexSandbox(vocabulary, CompileLimits(**limits))


def test_memory_bound_and_invalid_expressions_are_one_line_refusals() -> None:
    box = sandbox(time_s=300, memory_bytes=192 << 20, workers=1)
    try:
        with pytest.raises(RegexRefused, match="needed more than 192 MiB"):
            box.index("(.{1000}){1000}")  # a DFA of a million states
        with pytest.raises(RegexRefused, match="cannot constrain to that regex"):
            box.index("((")
        with pytest.raises(RegexRefused, match="not valid Unicode"):
            box.index("a\ud800")
        index = box.index("(ab|a)+b")  # a fresh worker replaced the one that died
        state = index.get_next_state(index.get_initial_state(), ord("a"))
        assert state is not None
    finally:
        box.close()


def test_the_cache_is_bounded_in_entries_and_bytes() -> None:
    box = sandbox(cache_entries=3, workers=1)
    try:
        for n in range(6):
            box.index(f"a{{{n + 1}}}")
        stats = box.cache_stats()
        assert stats["regex_cache_entries"] == 3
        small = stats["regex_cache_bytes"]
    finally:
        box.close()
    box = sandbox(cache_bytes=small, workers=1)  # room for about three small indexes
    try:
        for n in range(6):
            box.index(f"a{{{n + 1}}}")
        assert box.cache_stats()["regex_cache_bytes"] <= small
        assert box.cache_stats()["regex_cache_entries"] < 6
    finally:
        box.close()


def test_one_worker_compiles_many_expressions_in_a_row() -> None:
    """Each expression gets its own CPU-time bound on top of what the worker spent: a hard
    limit set for the first could never be raised for the second (the first real GRPO step
    through llm serve failed on its second request, "worker exit 1")."""
    # A wall bound far above the work (the default 20 s ran out at load ~7 on 2 cores): the
    # point is the CPU bound, which grows with what the worker spent, not the clock.
    compiler = sandbox(workers=1, time_s=300)
    try:
        # Each takes ~0.5-1 CPU-s (2^15-2^16 DFA states), so the worker's CPU time crosses
        # whole seconds between expressions and each new soft limit is higher than the last.
        for x, y in ("ab", "ac", "bc", "ad"):
            compiler.index(f"({x}|{y})*{x}({x}|{y}){{16}}")
    finally:
        compiler.close()
