"""The ``league`` config section shared by every game: matchmaking, ratings, schedule, tracking.

:class:`MatchmakingSection` holds the PFSP knobs; :class:`LeagueSection` adds everything the
:class:`~leaguezero.league.session.LeagueSession` reads (evaluator cadence, rating method, Elo K,
bootstrap, the elite margin of the checkpoint schedule, WandB). Both games subclass it and add
only their own keys (baseline ratings, tournament details); the shared keys have the same names
and defaults in both. ``eval_every`` and ``eval_games`` are shared names whose defaults each game
sets, because their units differ (Diplomacy steps and 7-player games, Yatzy iterations and
paired 2-player games). Renamed keys are still read, with a warning that names the new key
(:data:`RENAMED_KEYS`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from leaguezero.common.config import ConfigRenameWarning, Section, read_renamed_key
from leaguezero.league.matchmaker import BucketShares

# Old key in a ``league`` section -> its new name (configs and run config.yaml files written by
# earlier versions keep loading; both set to different values is an error).
RENAMED_KEYS = {"k_factor": "elo_k"}

__all__ = ["ConfigRenameWarning", "LeagueSection", "MatchmakingSection", "read_renamed_key"]


class MatchmakingSection(Section):
    """PFSP opponent sampling (docs/reference/league.md#matchmaking): bucket shares, peers, cold start."""  # noqa: E501

    mode: Literal["pfsp", "tiered"] = Field(
        "pfsp",
        description="Opponent sampling: PFSP buckets, or the original tiered weights "
        "(docs/reference/design.md#matchmaking-pfsp).",
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
    baselines_weighting: Literal["uniform", "pfsp"] = Field(
        "uniform",
        description="Opponent within the baselines share: uniform (each fixed bot equally often) "
        "or pfsp (weighted by `weighting` of the hero's decayed win rate against each, as the "
        "exploitable bucket is: the bots it still loses to come first, docs/reference/league.md).",
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


class LeagueSection(MatchmakingSection):
    """League around the hero: PFSP opponents, checkpoint schedule, async evaluator, tracking."""

    eval_every: int = Field(
        50, ge=1, description="Rate the newest checkpoint every N training steps/iterations."
    )
    eval_games: int = Field(7, ge=1, description="Evaluator games per gatekeeper.")
    rating: Literal["refit", "elo"] = Field(
        "refit", description="Ratings: Bradley-Terry refit of the log, or online Elo."
    )
    elo_k: float = Field(
        32.0,
        gt=0,
        description="Elo K factor: the evaluator's online Elo (rating: elo) and the live hero's "
        "rating from its training games.",
    )
    bootstrap: int = Field(100, ge=0, description="Bootstrap resamples for rating intervals.")
    elite_margin: float = Field(
        0.0,
        ge=0,
        description="Schedule's elite rule: a snapshot joins when the live hero's rating beats "
        "the best checkpoint's by more than this (0: a plain new high score).",
    )
    wandb: bool = Field(False, description="Also log to Weights & Biases (extra 'wandb').")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="wandb mode; offline needs no network (wandb sync later)."
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(old in data for old in RENAMED_KEYS):
            data = dict(data)
            for old, new in RENAMED_KEYS.items():
                if old in data:
                    value = data.pop(old)
                    data[new] = read_renamed_key(
                        f"league.{old}", f"league.{new}", value, data.get(new)
                    )
        return data
