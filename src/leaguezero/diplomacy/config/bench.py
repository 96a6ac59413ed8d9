"""The ``bench`` section of the Diplomacy config: the fixed benchmark suite."""

from __future__ import annotations

from pydantic import Field

from leaguezero.common.config import Section


class BenchSection(Section):
    """The fixed benchmark suite (leaguezero diplomacy bench; docs/results/diplomacy_bench.md)."""

    games: int = Field(
        301,
        ge=1,
        description="Games per benchmark opponent: 301 (a multiple of 7: every power equally "
        "often) puts a win rate's 95% interval within 0.057 of it at 0.5 and 0.040 at parity, "
        "so an agent that far from a floor gets a verdict; fewer games leave more inconclusive.",
    )
    checkpoints: list[str] = Field(
        default_factory=list,
        description="Frozen agents (policy checkpoints, LLM folders) benchmarked after the bots, "
        "floor: parity (1/7).",
    )
