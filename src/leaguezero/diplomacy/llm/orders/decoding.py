"""How an LLM seat turns its prompts into orders: the decoding strategy (``llm.mode``).

- :data:`GENERATE`: free text, parsed (an illegal order is counted and the unit holds);
- :data:`CONSTRAINED`: the same text, decoded so that every order is legal
  (:mod:`.constrained`); the completion is recorded with its constraint, so the trainer scores
  it under the same mask;
- :data:`RANK`: the model scores each unit's legal orders (:mod:`.ranking`); needs the
  in-process hf backend; nothing is recorded for training.

The config's ``llm.mode`` (or a command's ``--rank``) names one; :func:`decoding_named` is the
one lookup, done where the config is read. An :class:`~leaguezero.diplomacy.llm.tables.LLMTable`
asks its strategy to play each phase (:meth:`Decoding.play_phase`) with the sampling settings it
holds (:class:`Sampling`); the strategy returns each seat's :class:`SeatDecision` (its orders, this
phase's :class:`SeatStats` and, for a trainable answer, the action record whose payload is an
:class:`LLMPayload`), and the table keeps the stats and the records of the seats it trains.
The strategy never sees the table: this module imports nothing of
:mod:`~leaguezero.diplomacy.llm.tables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.prompt import extract_orders

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.env import DiplomacyEnv
    from leaguezero.diplomacy.llm.client import GenerationClient


@dataclass
class LLMPayload:
    """What :meth:`~leaguezero.diplomacy.llm.hero.LLMHero.log_prob` needs to score a completion
    again."""

    prompt: str
    token_ids: list[int]
    adapter: str | None  # the adapter that sampled it (for the record; scoring uses the hero's)
    choices: OrderChoices | None = None  # the constraint it was decoded under (mode constrained)
    # The sampling temperature: the trainer scores at it (train.score_temperature: sampling).
    temperature: float = 1.0


@dataclass
class SeatStats:
    """Order hygiene and volume of one seat over a game."""

    completions: int = 0
    tokens: int = 0
    invalid: int = 0
    missing: int = 0
    parsed: int = 0
    finished: int = 0  # completions that ended with end-of-sequence (not cut at the budget)
    truncated: int = 0  # completions cut at max_new_tokens
    grammar_violations: int = 0  # constrained answers outside their expression (failed seats)

    def add(self, other: SeatStats) -> None:
        """Add ``other``'s counts to these (a phase's counts into the game's)."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def answer_counts(self) -> dict[str, int]:
        """The counts a game reports for this seat (:class:`~leaguezero.diplomacy.game.seats.
        ReportsAnswers`)."""
        return {
            "answers": self.completions,
            "invalid": self.invalid,
            "missing": self.missing,
            "truncated": self.truncated,
            "grammar_violations": self.grammar_violations,
        }


@dataclass(frozen=True)
class Sampling:
    """What a strategy needs from its table: the model and how to sample it."""

    client: GenerationClient
    max_new_tokens: int
    temperature: float


@dataclass
class SeatDecision:
    """One seat's phase as a strategy decided it: its orders, this phase's counts, and the
    answer as a training record (None: nothing trainable, e.g. a failed or ranked answer)."""

    orders: list[str]
    stats: SeatStats
    record: ActionRecord | None = None


class Decoding(Protocol):
    """A decoding strategy (see the module doc)."""

    name: str
    trainable: bool  # whether GRPO can train the policy it plays (sampled token log-probs)

    def check_client(self, client: object) -> None:
        """Raise ``ValueError`` when ``client`` cannot decode this way."""

    def play_phase(
        self,
        sampling: Sampling,
        env: DiplomacyEnv,
        seats: Sequence[str],
        prompts: Sequence[str],
        choices: Sequence[OrderChoices],
        adapters: Sequence[str | None],
        phase_seed: int,
    ) -> dict[str, SeatDecision]:
        """Every seat's decision this phase, keyed by power."""


@dataclass(frozen=True)
class TextDecoding:
    """The model writes its answer; ``constrained``: only legal orders can be written."""

    name: str
    constrained: bool
    trainable: bool = True

    def check_client(self, client: object) -> None:
        pass

    def play_phase(self, sampling, env, seats, prompts, choices, adapters, phase_seed):
        extra = {"choices": choices} if self.constrained else {}  # plain clients need not know
        completions = sampling.client.generate(
            prompts, adapters, sampling.max_new_tokens, sampling.temperature, phase_seed, **extra
        )
        decisions: dict[str, SeatDecision] = {}
        for power, prompt, adapter, completion, choice in zip(
            seats, prompts, adapters, completions, choices, strict=True
        ):
            # An answer outside its expression is a failed seat: no orders (its units hold),
            # counted, and no record (the trainer's mask replay would refuse it).
            failed = completion.grammar_violation
            text = "" if failed else completion.text
            parsed = extract_orders(text, choice.legal, env.phase_type, choice.owed)
            stopped = completion.finish_reason == "stop"
            stats = SeatStats(
                completions=1,
                tokens=len(completion.token_ids),
                invalid=parsed.invalid,
                missing=parsed.missing,
                parsed=len(parsed.parsed),
                finished=int(stopped),
                truncated=int(not stopped),
                grammar_violations=int(failed),
            )
            record = None
            if not failed:
                constraint = choice if self.constrained else None
                ids = list(completion.token_ids)
                payload = LLMPayload(prompt, ids, adapter, constraint, sampling.temperature)
                record = ActionRecord(
                    power,
                    env.phase,
                    completion.logprob_sum,
                    payload,
                    tokens=len(ids),
                    truncated=not stopped,
                )
            decisions[power] = SeatDecision(parsed.orders, stats, record)
        return decisions


@dataclass(frozen=True)
class RankDecoding:
    """The model scores each unit's legal orders (:mod:`.ranking`)."""

    name: str = "rank"
    trainable: bool = False

    def check_client(self, client: object) -> None:
        from leaguezero.diplomacy.llm.model.hf_backend import HFBackend

        if not isinstance(client, HFBackend):
            raise ValueError("ranking mode scores orders in process: it needs the hf backend")

    def play_phase(self, sampling, env, seats, prompts, choices, adapters, phase_seed):
        from leaguezero.diplomacy.llm.orders.ranking import rank_orders

        decisions: dict[str, SeatDecision] = {}
        for i, (power, choice, prompt, adapter) in enumerate(
            zip(seats, choices, prompts, adapters, strict=True)
        ):
            generator = torch.Generator().manual_seed((phase_seed + i) & 0x7FFF_FFFF_FFFF_FFFF)
            picked, _ = rank_orders(
                sampling.client,
                prompt,
                choice.legal,
                adapter=adapter,
                phase_type=env.phase_type,
                owed=choice.owed,
                temperature=sampling.temperature,
                generator=generator,
            )
            stats = SeatStats(completions=1, parsed=len(picked), finished=1)
            decisions[power] = SeatDecision(picked, stats)
        return decisions


GENERATE = TextDecoding("generate", constrained=False)
CONSTRAINED = TextDecoding("constrained", constrained=True)
RANK = RankDecoding()
DECODINGS: dict[str, Decoding] = {d.name: d for d in (GENERATE, CONSTRAINED, RANK)}


def decoding_named(name: str) -> Decoding:
    """The strategy ``llm.mode`` names; raises ``ValueError`` listing the names."""
    try:
        return DECODINGS[name]
    except KeyError:
        raise ValueError(f"mode must be one of {', '.join(DECODINGS)}, got {name!r}") from None
