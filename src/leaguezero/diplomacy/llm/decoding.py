"""How an LLM seat turns its prompts into orders: the decoding strategy (``llm.mode``).

- :data:`GENERATE`: free text, parsed (an illegal order is counted and the unit holds);
- :data:`CONSTRAINED`: the same text, decoded so that every order is legal
  (:mod:`.constrained`); the completion is recorded with its constraint, so the trainer scores
  it under the same mask;
- :data:`RANK`: the model scores each unit's legal orders (:mod:`.ranking`); needs the
  in-process hf backend; nothing is recorded for training.

The config's ``llm.mode`` (or a command's ``--rank``) names one; :func:`decoding_named` is the
one lookup, done where the config is read. An :class:`~.tables.LLMTable` asks its strategy
to play each phase (:meth:`Decoding.play_phase`); a phase leaves each seat's
:class:`SeatStats` and, for the recorded adapter, an action record whose payload is an
:class:`LLMPayload`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from leaguezero.diplomacy.llm.constrained import OrderChoices
from leaguezero.diplomacy.llm.prompt import extract_orders
from leaguezero.diplomacy.train.grpo import ActionRecord

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.env import DiplomacyEnv
    from leaguezero.diplomacy.llm.tables import LLMTable


@dataclass
class LLMPayload:
    """What :meth:`LLMHero.log_prob` needs to score a completion again."""

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


class Decoding(Protocol):
    """A decoding strategy (see the module doc)."""

    name: str
    trainable: bool  # whether GRPO can train the policy it plays (sampled token log-probs)

    def check_client(self, client: object) -> None:
        """Raise ``ValueError`` when ``client`` cannot decode this way."""

    def play_phase(
        self,
        table: LLMTable,
        env: DiplomacyEnv,
        seats: Sequence[str],
        prompts: Sequence[str],
        choices: Sequence[OrderChoices],
        adapters: Sequence[str | None],
        phase_seed: int,
    ) -> dict[str, list[str]]:
        """Every seat's orders this phase (stats and records go to ``table``)."""


@dataclass(frozen=True)
class TextDecoding:
    """The model writes its answer; ``constrained``: only legal orders can be written."""

    name: str
    constrained: bool
    trainable: bool = True

    def check_client(self, client: object) -> None:
        pass

    def play_phase(self, table, env, seats, prompts, choices, adapters, phase_seed):
        extra = {"choices": choices} if self.constrained else {}  # plain clients need not know
        completions = table.client.generate(
            prompts, adapters, table.max_new_tokens, table.temperature, phase_seed, **extra
        )
        orders: dict[str, list[str]] = {}
        for power, prompt, adapter, completion, choice in zip(
            seats, prompts, adapters, completions, choices, strict=True
        ):
            # An answer outside its expression is a failed seat: no orders (its units hold),
            # counted, and no record (the trainer's mask replay would refuse it).
            failed = completion.grammar_violation
            text = "" if failed else completion.text
            parsed = extract_orders(text, choice.legal, env.phase_type, choice.owed)
            orders[power] = parsed.orders
            stats = table.stats.setdefault(power, SeatStats())
            stats.grammar_violations += failed
            stats.completions += 1
            stats.tokens += len(completion.token_ids)
            stats.invalid += parsed.invalid
            stats.missing += parsed.missing
            stats.parsed += len(parsed.parsed)
            stats.finished += completion.finish_reason == "stop"
            stats.truncated += completion.finish_reason != "stop"
            if table.records_seat(adapter) and not failed:
                constraint = choice if self.constrained else None
                ids = list(completion.token_ids)
                payload = LLMPayload(prompt, ids, adapter, constraint, table.temperature)
                table.records.append(
                    ActionRecord(
                        power,
                        env.phase,
                        completion.logprob_sum,
                        payload,
                        tokens=len(ids),
                        truncated=completion.finish_reason != "stop",
                    )
                )
        return orders


@dataclass(frozen=True)
class RankDecoding:
    """The model scores each unit's legal orders (:mod:`.ranking`)."""

    name: str = "rank"
    trainable: bool = False

    def check_client(self, client: object) -> None:
        from leaguezero.diplomacy.llm.hf_backend import HFBackend

        if not isinstance(client, HFBackend):
            raise ValueError("ranking mode scores orders in process: it needs the hf backend")

    def play_phase(self, table, env, seats, prompts, choices, adapters, phase_seed):
        from leaguezero.diplomacy.llm.ranking import rank_orders

        orders: dict[str, list[str]] = {}
        for i, (power, choice, prompt, adapter) in enumerate(
            zip(seats, choices, prompts, adapters, strict=True)
        ):
            generator = torch.Generator().manual_seed((phase_seed + i) & 0x7FFF_FFFF_FFFF_FFFF)
            picked, _ = rank_orders(
                table.client,
                prompt,
                choice.legal,
                adapter=adapter,
                phase_type=env.phase_type,
                owed=choice.owed,
                temperature=table.temperature,
                generator=generator,
            )
            orders[power] = picked
            stats = table.stats.setdefault(power, SeatStats())
            stats.completions += 1
            stats.parsed += len(picked)
            stats.finished += 1
        return orders


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
