from __future__ import annotations

import os
import tempfile

import pytest

# One line at the end of the run for tests skipped for want of an optional component.
from tests.optional_skips import pytest_terminal_summary, pytest_unconfigure  # noqa: F401

# Worker processes share 2 cores in CI: keep torch and numba to one thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
# llm.dtype: auto is float32 in the suite on every machine (bf16 where the CPU has bf16 units
# otherwise): tests compare numbers to goldens; the bf16 tests ask for bfloat16 by name.
os.environ.setdefault("LEAGUEZERO_LLM_DTYPE", "float32")
# Inference servers started by tests keep their admin token here, not in the user's home.
os.environ.setdefault(
    "LEAGUEZERO_ADMIN_TOKEN_FILE",
    os.path.join(tempfile.mkdtemp(prefix="lz-test-admin-"), "infer_admin_token"),
)


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    run_slow = config.getoption("-m") and "slow" in config.getoption("-m")
    skip_slow = pytest.mark.skip(reason="slow end-to-end run; use -m slow")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
