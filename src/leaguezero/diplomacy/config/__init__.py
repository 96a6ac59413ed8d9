"""The Diplomacy config: game length, scoring, ratings, seating and where games are saved.

Each field's description is its documentation (``configs/diplomacy_local_cpu.yaml`` is written
from these with :func:`leaguezero.common.config.commented_yaml`).

One section a module (:mod:`.run`, :mod:`.model`, :mod:`.train`, :mod:`.league`, :mod:`.llm`,
:mod:`.bench`); :class:`DiplomacyConfig` gathers them and the game's own keys, and every public
name is re-exported here (``from leaguezero.diplomacy.config import LLMSection``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from leaguezero.common.config import Section, move_renamed_keys
from leaguezero.diplomacy.config.bench import BenchSection
from leaguezero.diplomacy.config.league import ExploitersSection, LeagueSection
from leaguezero.diplomacy.config.llm import SAMPLING_BACKENDS, LLMSection, SamplingBackend
from leaguezero.diplomacy.config.model import ModelSection
from leaguezero.diplomacy.config.run import RunSection
from leaguezero.diplomacy.config.train import HERO_KINDS, HeroKind, TrainSection

__all__ = [
    "HERO_KINDS",
    "RENAMED_KEYS",
    "RETIRED_KEYS",
    "SAMPLING_BACKENDS",
    "BenchSection",
    "DiplomacyConfig",
    "ExploitersSection",
    "HeroKind",
    "LLMSection",
    "LeagueSection",
    "ModelSection",
    "RunSection",
    "SamplingBackend",
    "TrainSection",
]

# Old dotted key -> its new name (one vocabulary with Yatzy's config: run.seed, run.threads,
# a model section); old configs and run config.yaml files keep loading, with a warning.
RENAMED_KEYS = {
    "elo_k": "league.elo_k",
    "seed": "run.seed",
    "train.seed": "run.seed",
    "train.threads": "run.threads",
    "train.hidden": "model.hidden",
    "train.layers": "model.layers",
}
# Retired switches: still accepted in old configs (ignored, with a warning saying why).
RETIRED_KEYS = {
    "llm.bf16_autocast": "no gain measured in a whole league step; `leaguezero llm serve "
    "--bf16-autocast` keeps the option for serving",
    "llm.lora_dropout": "inert: the hf backend samples and trains in eval mode, so adapters "
    "are written with dropout 0",
}


class DiplomacyConfig(Section):
    """No-press Diplomacy rollouts and tournaments (docs/reference/design.md#league-training)."""

    run: RunSection = RunSection()
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
    model: ModelSection = ModelSection()
    train: TrainSection = TrainSection()
    league: LeagueSection = LeagueSection()
    llm: LLMSection = LLMSection()
    bench: BenchSection = BenchSection()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return move_renamed_keys(data, RENAMED_KEYS, RETIRED_KEYS)

    @model_validator(mode="after")
    def _sampler_weight_comparable(self) -> DiplomacyConfig:
        # The sampler weight compares two log-probs of one distribution. The in-process
        # sampler and llm serve report them at the sampling temperature, vLLM (raw_logprobs,
        # its default) at 1; a config cannot tell the servers apart: refused, not mis-weighted.
        train = self.train
        if not train.hero.llm or train.temperature == 1.0 or train.is_correction == "none":
            return self
        if self.llm.sampling.shared_server:
            raise ValueError(
                f"train.temperature {train.temperature} with llm.backend openai and "
                f"train.is_correction {train.is_correction}: vLLM reports raw (temperature-1) "
                "log-probs, so the sampler weight would compare different distributions; use "
                "train.temperature 1, or train.is_correction none (the trainer still scores at "
                "the sampling temperature; the mismatch statistics are then not meaningful)"
            )
        if train.score_temperature == "one":
            raise ValueError(
                f"train.temperature {train.temperature} with train.score_temperature one and "
                f"train.is_correction {train.is_correction}: the sampler reports log-probs at "
                "the sampling temperature, the trainer would score at 1; use "
                "train.score_temperature sampling or train.is_correction none"
            )
        return self
