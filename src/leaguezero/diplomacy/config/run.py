"""The ``run`` section of the Diplomacy config: seed, threads, and where training runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from leaguezero.common.config import Section


class RunSection(Section):
    """Run identity: seed, threads, and where training runs (the keys of Yatzy's run section)."""

    seed: int = Field(
        0,
        ge=0,
        description="Master seed; every game and seat seed, the initial weights, sampling and "
        "opponent draws derive from it.",
    )
    threads: int = Field(
        1,
        ge=1,
        description="Torch threads per process (1: one core, the shared-machine default; an LLM "
        "hero sampled in process gains from more).",
    )
    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where diplomacy train plays the network hero's games and the evaluator's "
        "jobs: this process, or Ray tasks (extra 'ray'; docs/guides/cluster.md).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster for backend ray: host:port, 'auto', or null (RAY_ADDRESS, the "
        "cluster `leaguezero cluster start` started, else a private local one).",
    )
