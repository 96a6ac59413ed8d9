"""One real local Ray cluster for the whole test session (``ray.init`` costs ~5-10 s, 350 MB)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray instance with 2 CPUs, started once; yields the ``ray`` module."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    if not ray.is_initialized():
        # "local": a fresh instance even when `ray start` left a cluster address on this machine.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
