from leaguezero.common.memory import memory_growth, rss_mb


def test_rss_is_this_process_and_grows_with_an_allocation() -> None:
    before = rss_mb()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident
    assert rss_mb() >= before + 32
    del block


def test_growth_is_judged_after_the_warm_up() -> None:
    # A jump during the first 10% of the steps, then flat: no growth.
    flat = [(1, 100.0), (5, 400.0)] + [(s, 400.0 + (s % 3)) for s in range(11, 101)]
    result = memory_growth(flat)
    assert result["from_step"] == 11 and result["to_step"] == 100
    assert abs(result["growth_mb"]) <= 2 and abs(result["slope_mb_per_1000_steps"]) < 20
    assert result["rss_mb_max"] == 402.0
    # A leak of 1 MiB a step shows as ~1,000 MiB per 1,000 steps.
    leak = [(s, 100.0 + s) for s in range(1, 201)]
    assert abs(memory_growth(leak)["slope_mb_per_1000_steps"] - 1000) < 1
    assert memory_growth([]) is None and memory_growth([(1, 5.0)]) is None


def test_native_caches_are_capped_in_every_leaguezero_process_unless_the_user_set_them():
    """Importing leaguezero caps oneDNN's per-shape caches (their default 1,024 entries grew a
    GRPO run's memory by GBs); a value the user exported wins."""
    import os
    import subprocess
    import sys

    from leaguezero.common.memory import NATIVE_CACHE_ENTRIES, NATIVE_CACHE_VARIABLES

    code = f"import os, leaguezero; print([os.environ[n] for n in {NATIVE_CACHE_VARIABLES!r}])"
    env = {k: v for k, v in os.environ.items() if k not in NATIVE_CACHE_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == str([str(NATIVE_CACHE_ENTRIES)] * 2), out.stderr
    env["LRU_CACHE_CAPACITY"] = "2048"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == str(["256", "2048"]), out.stderr
