"""The Diplomacy config: game length, scoring, ratings, seating and where games are saved.

Each field's description is its documentation (``configs/diplomacy_local_cpu.yaml`` is written
from these with :func:`leaguezero.common.config.commented_yaml`).
"""

from __future__ import annotations

from pydantic import Field

from leaguezero.common.config import Section


class DiplomacyConfig(Section):
    """No-press Diplomacy rollouts and tournaments (league spec §4, §5, §7)."""

    seed: int = Field(0, ge=0, description="Master seed; every game and seat seed derives from it.")
    max_years: int = Field(
        10,
        ge=1,
        le=200,
        description="Game years played (1901 .. 1900+max_years) before a game is stopped as a "
        "draw; random play almost never ends on its own.",
    )
    win_bonus: float = Field(
        5.0, ge=0, description="Score bonus for a single centre leader at or above the threshold."
    )
    winner_threshold_sc: int = Field(
        10, ge=1, le=34, description="Centres the single leader needs to earn the win bonus."
    )
    solo_sc: int = Field(
        18,
        ge=1,
        le=34,
        description="Centres that make a solo in sum-of-squares scoring (the engine's victory).",
    )
    elo_k: float = Field(32.0, gt=0, description="Elo K factor of the multi-player update.")
    initial_rating: float = Field(1000.0, description="Rating of an agent not yet rated.")
    max_unique_opponents: int = Field(
        6,
        ge=1,
        le=6,
        description="Cluster sampling: at most this many distinct opponents, cloned across the "
        "six other seats ([Hero, A, A, A, B, B, B] for 2).",
    )
    games_dir: str | None = Field(
        "runs/diplomacy/games",
        description="Folder for finished games (the engine's saved-game JSON); null disables.",
    )
    record_observations: bool = Field(
        True, description="Store the hero's board observation in each trajectory step."
    )
