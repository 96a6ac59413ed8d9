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


_ARENA_PROBE = r"""
import ctypes, re, sys, tempfile, threading
from leaguezero.common.memory import bound_malloc_arenas
applied = bound_malloc_arenas() if sys.argv[1] == "cap" else False
start = threading.Barrier(8)
def work():
    start.wait()  # eight threads alive at once, each asking malloc for its first blocks
    keep = [bytearray(512) for _ in range(2000)]
    start.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as f:
    fp = libc.fopen(f.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    heaps = len(re.findall(r'<heap nr="\d+">', open(f.name).read()))
print(applied, heaps)
"""


def test_malloc_arenas_are_capped_for_the_llm_processes_threads(tmp_path) -> None:
    """bound_malloc_arenas (called where the LLM runtime loads a model) keeps threads started
    after it on two glibc arenas; without it eight threads get arenas of their own."""
    import os
    import subprocess
    import sys

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc arenas")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}

    def probe(mode: str) -> tuple[str, int]:
        cmd = [sys.executable, "-c", _ARENA_PROBE, mode]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True)
        applied, heaps = out.stdout.split()
        return applied, int(heaps)

    assert probe("cap") == ("True", 2)
    applied, heaps = probe("default")
    assert applied == "False" and heaps > 2
    env["MALLOC_ARENA_MAX"] = "4"  # the user's value wins (glibc read it at start)
    applied, heaps = probe("cap")
    assert applied == "False" and heaps <= 4
