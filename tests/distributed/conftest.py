"""One real local Ray cluster for the whole test session (``ray.init`` costs ~5-10 s, 350 MB)."""

from __future__ import annotations

import os

import pytest

# Test clusters bind loopback only (Ray would otherwise bind the machine's network address);
# set before Ray starts, and inherited by the `yz run --backend ray` subprocesses of the tests.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


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
