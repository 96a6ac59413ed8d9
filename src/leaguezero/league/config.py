"""The matchmaking part of a league config, shared by every game's ``league`` section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from leaguezero.common.config import Section
from leaguezero.league.matchmaker import BucketShares


class MatchmakingSection(Section):
    """PFSP opponent sampling (league spec §3): bucket shares, peers, cold start."""

    mode: Literal["pfsp", "tiered"] = Field(
        "pfsp", description="Opponent sampling: PFSP buckets, or the spec's tiered weights."
    )
    mirror_share: float = Field(0.30, ge=0, le=1, description="PFSP share: the current self.")
    peers_share: float = Field(0.40, ge=0, le=1, description="PFSP share: agents within +-window.")
    exploitable_share: float = Field(
        0.20, ge=0, le=1, description="PFSP share: past checkpoints the hero should beat."
    )
    baselines_share: float = Field(0.10, ge=0, le=1, description="PFSP share: the fixed bots.")
    peer_window: float = Field(100.0, gt=0, description="Elo distance that makes a peer.")
    weighting: Literal["hard", "variance"] = Field(
        "hard", description="Exploitable weight: (1-p)^2 (hard) or p(1-p) (variance)."
    )
    min_checkpoints: int = Field(
        2, ge=0, description="Cold start: baselines only until this many checkpoints exist."
    )

    @model_validator(mode="after")
    def _shares_sum_to_one(self) -> MatchmakingSection:
        total = self.mirror_share + self.peers_share + self.exploitable_share + self.baselines_share
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the four league *_share values must sum to 1, they sum to {total:g}")
        return self

    def bucket_shares(self) -> BucketShares:
        """The shares as the matchmaker takes them."""
        return BucketShares(
            self.mirror_share, self.peers_share, self.exploitable_share, self.baselines_share
        )
