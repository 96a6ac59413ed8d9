"""LLM seats of Diplomacy rollouts: the tables that sample a game's LLM seats together.

- :class:`LLMTable` plays every LLM seat of one game: on the first ``get_orders`` of a phase it
  builds the prompts of *all* its seats that have orders to give and has its decoding strategy
  (:mod:`~leaguezero.diplomacy.llm.orders.decoding`) turn them into orders in one call (one batch,
  mixed adapters). Seats whose adapter is the recorded one (the hero's) append a
  :class:`~leaguezero.diplomacy.game.records.ActionRecord` per completion: sequence log-prob as
  ``old_log_prob``, prompt and token ids as payload. ``table.resolver`` plugs into
  :func:`~leaguezero.diplomacy.game.rollout.run_rollout`.
- :class:`SharedTables`: standalone seats (one resolver call each) that still batch per game.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from leaguezero.diplomacy.game.catalogue import AgentSpec, Seating
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.llm.client import GenerationClient
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.decoding import GENERATE, Decoding, Sampling, SeatStats
from leaguezero.diplomacy.llm.orders.prompt import build_prompt


class LLMPolicy:
    """One seat of an :class:`LLMTable` (the rollout's ``Policy``)."""

    def __init__(self, table: LLMTable) -> None:
        self.table = table

    @property
    def records(self) -> list[ActionRecord]:
        """The table's records (shared by its seats; filter by ``power``)."""
        return self.table.records

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders of ``power`` this phase (computed for all the table's seats at once)."""
        return self.table.orders(env, power)

    def answer_stats(self, env: DiplomacyEnv, power: str) -> dict[str, int] | None:
        """``power``'s own answer counts this game (:class:`~leaguezero.diplomacy.game.seats.
        ReportsAnswers`)."""
        stats = self.table.stats.get(power)
        return None if stats is None or not stats.completions else stats.answer_counts()


class LLMTable:
    """The LLM seats of one game, sampled together each phase (see module doc).

    ``seating``: the game's seating ``{power: agent}``, parsed (its names are the ones the
    seats sample under): bot seats are ignored, the base model samples without an adapter,
    every other seat with its :attr:`~leaguezero.diplomacy.game.catalogue.AgentSpec.adapter`
    loaded on ``client``. ``record_adapter``: completions of seats with this adapter are
    recorded (None: none).
    ``seed``: the game's seed; each phase draws a fresh seed from it. ``render``: how a
    prompt is sent to the model (the tokenizer's chat template, see
    :func:`~leaguezero.diplomacy.llm.orders.prompt.render_prompt`; default: as written).
    ``decoding``: how prompts become orders (:mod:`~leaguezero.diplomacy.llm.orders.decoding`).
    """

    def __init__(
        self,
        client: GenerationClient,
        seating: Mapping[str, AgentSpec],
        *,
        record_adapter: str | None = None,
        record_base: bool = False,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        seed: int = 0,
        render: Callable[[str], str] | None = None,
        decoding: Decoding = GENERATE,
    ) -> None:
        decoding.check_client(client)
        self.client = client
        self.render = render
        self.decoding = decoding
        # The seating to give run_rollout (its resolver answers every LLM seat from here).
        self.seating: Seating = dict(seating)
        self.seats = {p: s.adapter for p, s in seating.items() if not s.is_bot}
        self.record_adapter = record_adapter
        self.record_base = record_base
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.records: list[ActionRecord] = []
        self.stats = {p: SeatStats() for p in self.seats}
        self.calls = 0  # generate calls made (one per phase with LLM orders)
        # A standalone actor: any power asked is played alone with `solo_adapter`.
        self.solo = False
        self.solo_adapter: str | None = None
        self._key: tuple[int, str, int] | None = None
        self._orders: dict[str, list[str]] = {}

    def resolver(self, spec: AgentSpec) -> LLMPolicy:
        """The rollout's resolver: every LLM seat gets a policy backed by this table."""
        if spec.adapter not in set(self.seats.values()):
            raise KeyError(f"agent {spec.name!r} has no seat at this LLM table")
        return LLMPolicy(self)

    def records_seat(self, adapter: str | None) -> bool:
        if adapter is None:
            return self.record_base
        return adapter == self.record_adapter

    def orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """``power``'s orders in ``env``'s phase; samples every seat on the phase's first call."""
        key = (id(env), env.phase, env.phases_processed)
        if key != self._key:
            self._key = key
            self._orders = self._sample_phase(env, [p for p in POWERS if p in self.seats])
        if power not in self._orders:  # a solo actor's seat, or a seat asked twice: alone
            if power not in self.seats and not self.solo:
                raise KeyError(f"{power} has no seat at this LLM table")
            return self._sample_phase(env, [power]).get(power, [])
        return self._orders.pop(power)

    def _sample_phase(self, env: DiplomacyEnv, powers: Sequence[str]) -> dict[str, list[str]]:
        phase_seed = int(
            np.random.SeedSequence([self.seed, env.phases_processed, self.calls]).generate_state(1)[
                0
            ]
        )
        seats, prompts, choices = [], [], []
        for power in powers:
            legal = env.legal_orders(power)
            if legal:
                seats.append(power)
                prompt = build_prompt(env, power, legal)
                prompts.append(self.render(prompt) if self.render is not None else prompt)
                owed = abs(env.adjustment_count(power)) if env.phase_type == "A" else None
                choices.append(OrderChoices(legal, env.phase_type, owed))
        if not seats:
            return {}
        adapters = [self.seats.get(p, self.solo_adapter) for p in seats]
        self.calls += 1
        sampling = Sampling(self.client, self.max_new_tokens, self.temperature)
        decisions = self.decoding.play_phase(
            sampling, env, seats, prompts, choices, adapters, phase_seed
        )
        for power, adapter in zip(seats, adapters, strict=True):
            decision = decisions[power]
            self.stats.setdefault(power, SeatStats()).add(decision.stats)
            if decision.record is not None and self.records_seat(adapter):
                self.records.append(decision.record)
        return {power: decision.orders for power, decision in decisions.items()}


class SharedTables:
    """Standalone seats that still batch: one :class:`LLMTable` per game (keyed by its env).

    A resolver hands each seat a :meth:`policy` that knows only its adapter; a seat joins its
    game's table the first time it is asked for orders, so from the second phase on every LLM
    seat of a game is sampled in one call (the first phase samples seats as they join). The
    last few games' tables are kept (games played in turn or a few at once). ``make_table``
    gets the game's number: its seed when the env carries one
    (:func:`~leaguezero.diplomacy.game.rollout.run_rollout` sets it), so games played at once get
    the tables they would get in turn; else the count of games seen.
    """

    def __init__(self, make_table: Callable[[int], LLMTable], keep: int = 16) -> None:
        self.make_table = make_table
        self.keep = keep
        self._lock = threading.Lock()  # games played in threads (run_tournament's concurrency)
        self._tables: dict[int, tuple[DiplomacyEnv, LLMTable]] = {}
        self._games = 0

    def policy(self, adapter: str | None) -> _SharedSeat:
        """A seat playing ``adapter`` (None: the base model) at whatever game asks it."""
        return _SharedSeat(self, adapter)

    def orders(self, env: DiplomacyEnv, power: str, adapter: str | None) -> list[str]:
        with self._lock:
            entry = self._tables.get(id(env))
            if entry is None or entry[0] is not env:
                self._games += 1
                entry = (env, self.make_table(env.seed if env.seed is not None else self._games))
                self._tables[id(env)] = entry
                while len(self._tables) > self.keep:
                    self._tables.pop(next(iter(self._tables)))
        table = entry[1]
        table.seats.setdefault(power, adapter)
        table.stats.setdefault(power, SeatStats())
        return table.orders(env, power)

    def answer_stats(self, env: DiplomacyEnv, power: str) -> dict[str, int] | None:
        """``power``'s own answer counts in ``env``'s game (None: no table, no answers)."""
        entry = self._tables.get(id(env))
        if entry is None or entry[0] is not env:
            return None
        stats = entry[1].stats.get(power)
        return None if stats is None or not stats.completions else stats.answer_counts()


class _SharedSeat:
    def __init__(self, tables: SharedTables, adapter: str | None) -> None:
        self.tables = tables
        self.adapter = adapter
        self.records: list[ActionRecord] = []

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        return self.tables.orders(env, power, self.adapter)

    def answer_stats(self, env: DiplomacyEnv, power: str) -> dict[str, int] | None:
        return self.tables.answer_stats(env, power)
