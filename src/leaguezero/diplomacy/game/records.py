"""The record of play: what a seat sampled (:class:`ActionRecord`), the seat player that keeps
those records (:class:`Actor`), and one finished game as the trainer reads it
(:class:`PlayedGame`). The game's own vocabulary: the agents (the policy network), the LLM seats
and the GRPO trainer all read and write these, so they live below all three."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # keeps this module importable without the engine
    from leaguezero.diplomacy.game.catalogue import Seating
    from leaguezero.diplomacy.game.env import DiplomacyEnv


@dataclass
class ActionRecord:
    """One sampled action piece of a seat: what the trainer needs to score it again.

    ``power``/``phase``: who acted and when; ``old_log_prob``: log pi_old(action) under the
    weights that sampled it (a float, no graph); ``payload``: policy-specific data for the
    policy's ``log_prob`` (:class:`~leaguezero.diplomacy.train.grpo.GRPOPolicy`): board features
    and chosen index for the network, prompt and completion token ids for the LLM. The trainer
    never looks inside ``payload``. ``tokens``: how many tokens ``old_log_prob`` sums over (an
    LLM completion's length; one for the network's choice), the length of the per-token rows
    and of the sampler weight's mean; ``truncated``: the answer was cut at the token budget
    (``train.mask_truncated``).
    """

    power: str
    phase: str
    old_log_prob: float
    payload: Any
    tokens: int = 1
    truncated: bool = False


@runtime_checkable
class Actor(Protocol):
    """A seat player that records its sampled actions (``records`` grows as it plays)."""

    records: list[ActionRecord]

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]: ...


@dataclass(frozen=True)
class PlayedGame:
    """One training game, from the rollout to the loss: every power's final score, the game's
    seed, the action records of every seat the live hero played (``record.power`` tells the
    seats apart) and each power's running score (centres + half its units, the final score's
    formula without the winner's bonus) when each phase began, keyed like
    ``ActionRecord.phase`` (``RolloutResult.phase_start``; ``credit="phase"`` needs it).

    ``seat``: the learning seat the trainer reads the game at (the loop sets it per learning
    seat, :func:`dataclasses.replace`); its :attr:`score`, :attr:`seat_records` and
    :attr:`seat_phase_start` are the GRPO sample."""

    scores: Mapping[str, float]
    seed: int
    records: list[ActionRecord]
    phase_start: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # The LLM hero may reseat a table (cluster seating when the server is full), shape its
    # seats' rewards (llm.format_penalty) and count the hero power's order hygiene (its
    # SeatStats); None: as given / the scores / none.
    seating: Seating | None = None
    rewards: dict[str, float] | None = None
    stats: Any = None
    seat: str | None = None

    def reward(self, power: str) -> float:
        """``power``'s GRPO reward: its shaped reward if the hero gave one, else its score."""
        if self.rewards is not None and power in self.rewards:
            return self.rewards[power]
        return self.scores[power]

    def _seat(self) -> str:
        if self.seat is None:
            raise ValueError("a PlayedGame is trained at a learning seat: set its seat")
        return self.seat

    @property
    def score(self) -> float:
        """The learning seat's reward."""
        return self.reward(self._seat())

    @property
    def seat_records(self) -> list[ActionRecord]:
        """The learning seat's records."""
        seat = self._seat()
        return [r for r in self.records if r.power == seat]

    @property
    def seat_phase_start(self) -> dict[str, float]:
        """The learning seat's running score when each phase began."""
        seat = self._seat()
        return {phase: start[seat] for phase, start in self.phase_start.items()}


def seat_game(
    score: float,
    records: Sequence[ActionRecord],
    phase_start: Mapping[str, float] | None = None,
    seat: str | None = None,
) -> PlayedGame:
    """A game known only at one seat (``seat``, default the records' power): its score, its
    records and (optionally) its running score per phase; for callers that play their own
    rollouts (tests, benchmarks)."""
    seat = seat or (records[0].power if records else "hero")
    starts = {phase: {seat: value} for phase, value in (phase_start or {}).items()}
    return PlayedGame({seat: score}, 0, list(records), starts, seat=seat)
