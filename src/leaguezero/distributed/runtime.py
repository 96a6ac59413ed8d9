"""Connecting to Ray: one place that imports it, with an error that says how to install it."""

from __future__ import annotations

import os
import sys
from types import ModuleType


class RayUnavailableError(RuntimeError):
    """Ray is not installed, or no cluster can be reached."""


# Ray reads this at import and start: "0" makes a node pick 127.0.0.1 instead of its network IP.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def require_ray() -> ModuleType:
    """The ``ray`` module; raises :class:`RayUnavailableError` naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(
            "the ray backend needs Ray: pip install 'leaguezero[ray]' (or run.backend=local)"
        ) from None
    return ray


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> ModuleType:
    """Connect this process to Ray once and return the module.

    Args:
        address: ``host:port`` of a running cluster, ``"auto"``, or None (``RAY_ADDRESS``, the
            cluster ``ray start``/``leaguezero cluster start`` left on this machine, else a
            private local instance with ``num_cpus`` CPUs).
        num_cpus: CPUs of a private local instance (ignored when joining a cluster).

    An already-initialised Ray (a test session's cluster, a user's notebook) is reused as is.

    Raises:
        RayUnavailableError: Ray is missing or the address cannot be reached.
    """
    if address in (None, "local") and "ray" not in sys.modules:
        # A private instance serves this machine only: bind it to loopback (Ray otherwise binds
        # the machine's network address even for a single-node instance). Ray reads this when
        # it is imported, hence before require_ray().
        os.environ.setdefault(LOOPBACK_ENV, "0")
    ray = require_ray()
    if ray.is_initialized():
        return ray
    # Workers inherit the driver's environment; keep their BLAS/numba at one thread (two torch
    # threads beside a busy process ran 30-70x slower than one;
    # docs/reference/design.md#one-torch-thread-per-process).
    env = {var: os.environ.get(var, "1") for var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    try:
        ray.init(
            address=address,
            num_cpus=num_cpus if address is None else None,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": env},
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = address or os.environ.get("RAY_ADDRESS") or "a local instance"
        raise RayUnavailableError(f"cannot start or reach Ray at {where}: {err}") from None
    return ray
