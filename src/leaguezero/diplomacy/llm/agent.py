"""LLM seats for Diplomacy rollouts, and the hero's adapter as a GRPO policy.

- :class:`LLMTable` plays every LLM seat of one game: on the first ``get_orders`` of a phase it
  builds the prompts of *all* its seats that have orders to give, samples them in one
  ``generate`` call (one batch, mixed adapters), parses them with
  :func:`~.prompt.extract_orders` and hands each seat its orders. Seats whose adapter is the
  recorded one (the hero's) append a :class:`~leaguezero.diplomacy.train.grpo.ActionRecord` per
  completion: sequence log-prob as ``old_log_prob``, prompt and token ids as payload.
  ``table.resolver`` plugs into :func:`~leaguezero.diplomacy.game.rollout.run_rollout`.
- :class:`LLMHero` is the GRPO policy (:class:`~leaguezero.diplomacy.train.grpo.GRPOPolicy`) of the
  hero's LoRA adapter on an :class:`~.hf_backend.HFBackend`: ``actor`` (one seat),
  ``table`` (all LLM seats of a game, batched), ``log_prob`` (differentiable, hero adapter
  only), ``trainable_parameters``, ``save``/``load`` of adapter folders. When sampling happens
  on a server (vLLM), the trained weights are published lazily as a new immutable version
  (``hero-v0001``, ...) before the next game, and the superseded version is unloaded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from leaguezero.diplomacy.game.bots import BOTS
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.seats import BASE_MODEL
from leaguezero.diplomacy.llm.adapters import AdapterSlots, versioned_name
from leaguezero.diplomacy.llm.client import GenerationClient
from leaguezero.diplomacy.llm.constrained import OrderChoices
from leaguezero.diplomacy.llm.hf_backend import HFBackend
from leaguezero.diplomacy.llm.prompt import build_prompt, extract_orders, render_prompt
from leaguezero.diplomacy.train.grpo import ActionRecord


@dataclass
class LLMPayload:
    """What :meth:`LLMHero.log_prob` needs to score a completion again."""

    prompt: str
    token_ids: list[int]
    adapter: str | None  # the adapter that sampled it (for the record; scoring uses the hero's)
    choices: OrderChoices | None = None  # the constraint it was decoded under (mode constrained)


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


def _is_llm_seat(name: str | None) -> bool:
    return name is None or name not in BOTS


def _adapter_of(name: str | None) -> str | None:
    return None if name in (None, BASE_MODEL) else name


MODES = ("generate", "constrained", "rank")


def payload_log_probs(
    backend: HFBackend, payloads: Sequence[LLMPayload], adapter: str | None
) -> list[torch.Tensor]:
    """Per-token log-probs of recorded completions under ``adapter``, each under the
    constraint it was sampled with (if any): the policy that played, recomputed."""
    allowed = [backend.allowed_tokens(p.choices, p.token_ids) for p in payloads]
    return backend.logprobs(
        [p.prompt for p in payloads],
        [p.token_ids for p in payloads],
        adapter,
        allowed if any(a is not None for a in allowed) else None,
    )


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


class LLMTable:
    """The LLM seats of one game, sampled together each phase (see module doc).

    ``power_adapters``: the game's seating ``{power: agent}``; bot seats are ignored, ``None``
    or ``"base_model"`` is the base model, any other name an adapter loaded on ``client``.
    ``record_adapter``: completions of seats with this adapter are recorded (None: none).
    ``seed``: the game's seed; each phase draws a fresh seed from it. ``render``: how a
    prompt is sent to the model (the tokenizer's chat template, see :func:`~.prompt.render_prompt`;
    default: as written). ``mode``: ``generate`` (free text, parsed), ``constrained`` (the
    same text, decoded so that every order is legal, :mod:`.constrained`; recorded for training
    with its constraint) or ``rank`` (the model scores each unit's legal orders,
    :mod:`.ranking`; nothing is recorded for training).
    """

    def __init__(
        self,
        client: GenerationClient,
        power_adapters: Mapping[str, str | None],
        *,
        record_adapter: str | None = None,
        record_base: bool = False,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        seed: int = 0,
        render: Callable[[str], str] | None = None,
        mode: str = "generate",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "rank" and not hasattr(client, "logprobs"):
            raise ValueError("ranking mode scores orders in process: it needs the hf backend")
        self.client = client
        self.render = render
        self.mode = mode
        # The seating to give run_rollout (its resolver answers every LLM seat from here).
        self.seating: dict[str, str | None] = dict(power_adapters)
        self.seats = {p: _adapter_of(a) for p, a in power_adapters.items() if _is_llm_seat(a)}
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

    def resolver(self, name: str | None) -> LLMPolicy:
        """The rollout's resolver: every LLM seat gets a policy backed by this table."""
        if _adapter_of(name) not in set(self.seats.values()):
            raise KeyError(f"agent {name!r} has no seat at this LLM table")
        return LLMPolicy(self)

    def _records_seat(self, adapter: str | None) -> bool:
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
        if self.mode == "rank":
            return self._rank_phase(env, seats, choices, prompts, adapters, phase_seed)
        constrained = self.mode == "constrained"
        extra = {"choices": choices} if constrained else {}  # plain clients need not know it
        completions = self.client.generate(
            prompts, adapters, self.max_new_tokens, self.temperature, phase_seed, **extra
        )
        orders: dict[str, list[str]] = {}
        for power, prompt, adapter, completion, choice in zip(
            seats, prompts, adapters, completions, choices, strict=True
        ):
            parsed = extract_orders(completion.text, choice.legal, env.phase_type, choice.owed)
            orders[power] = parsed.orders
            stats = self.stats.setdefault(power, SeatStats())
            stats.completions += 1
            stats.tokens += len(completion.token_ids)
            stats.invalid += parsed.invalid
            stats.missing += parsed.missing
            stats.parsed += len(parsed.parsed)
            stats.finished += completion.finish_reason == "stop"
            stats.truncated += completion.finish_reason != "stop"
            if self._records_seat(adapter):
                constraint = choice if constrained else None
                payload = LLMPayload(prompt, list(completion.token_ids), adapter, constraint)
                self.records.append(ActionRecord(power, env.phase, completion.logprob_sum, payload))
        return orders

    def _rank_phase(self, env, seats, choices, prompts, adapters, phase_seed):
        from leaguezero.diplomacy.llm.ranking import rank_orders

        orders: dict[str, list[str]] = {}
        for i, (power, choice, prompt, adapter) in enumerate(
            zip(seats, choices, prompts, adapters, strict=True)
        ):
            generator = torch.Generator().manual_seed((phase_seed + i) & 0x7FFF_FFFF_FFFF_FFFF)
            picked, _ = rank_orders(
                self.client,
                prompt,
                choice.legal,
                adapter=adapter,
                phase_type=env.phase_type,
                owed=choice.owed,
                temperature=self.temperature,
                generator=generator,
            )
            orders[power] = picked
            stats = self.stats.setdefault(power, SeatStats())
            stats.completions += 1
            stats.parsed += len(picked)
            stats.finished += 1
        return orders


class SharedTables:
    """Standalone seats that still batch: one :class:`LLMTable` per game (keyed by its env).

    A resolver hands each seat a :meth:`policy` that knows only its adapter; a seat joins its
    game's table the first time it is asked for orders, so from the second phase on every LLM
    seat of a game is sampled in one call (the first phase samples seats as they join). The
    last few games' tables are kept (games played in turn or a few at once).
    """

    def __init__(self, make_table: Callable[[int], LLMTable], keep: int = 8) -> None:
        self.make_table = make_table
        self.keep = keep
        self._tables: dict[int, tuple[DiplomacyEnv, LLMTable]] = {}
        self._games = 0

    def policy(self, adapter: str | None) -> _SharedSeat:
        """A seat playing ``adapter`` (None: the base model) at whatever game asks it."""
        return _SharedSeat(self, adapter)

    def orders(self, env: DiplomacyEnv, power: str, adapter: str | None) -> list[str]:
        entry = self._tables.get(id(env))
        if entry is None or entry[0] is not env:
            self._games += 1
            entry = (env, self.make_table(self._games))
            self._tables[id(env)] = entry
            while len(self._tables) > self.keep:
                self._tables.pop(next(iter(self._tables)))
        table = entry[1]
        table.seats.setdefault(power, adapter)
        table.stats.setdefault(power, SeatStats())
        return table.orders(env, power)


class _SharedSeat:
    def __init__(self, tables: SharedTables, adapter: str | None) -> None:
        self.tables = tables
        self.adapter = adapter
        self.records: list[ActionRecord] = []

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        return self.tables.orders(env, power, self.adapter)


class LLMHero:
    """The hero's LoRA adapter as a GRPO policy (see module doc).

    ``backend``: where the adapter is trained (and sampled, unless ``sampler`` is given);
    ``sampler``: a client that samples games (e.g. :class:`~.openai_client.OpenAIClient` to
    vLLM), which gets each trained version as ``{prefix}-v{NNNN}`` saved under
    ``adapters_dir`` (a path the sampler's server can read); ``slots``: the sampler's adapter
    slots (the live hero version is pinned). ``in_process``: ``sampler`` runs on ``backend``
    itself (e.g. a :class:`~.batching.BatchingGenerator` front), so the training adapter is
    sampled directly and nothing is published. ``mode``: ``generate`` or ``constrained``
    (:mod:`.constrained`: every order legal, log-probs over the allowed tokens).
    """

    TRAIN_ADAPTER = "hero_train"
    # Sampled log-probs come from another forward pass (a KV-cache loop, or a server with its
    # own kernels): the trainer recomputes the old log-probs before its first epoch.
    recompute_old_log_probs = True

    def __init__(
        self,
        backend: HFBackend,
        *,
        sampler: GenerationClient | None = None,
        adapters_dir: str | Path | None = None,
        prefix: str = "hero",
        slots: AdapterSlots | None = None,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        in_process: bool = False,
        mode: str = "generate",
    ) -> None:
        self.backend = backend
        self.sampler = sampler if sampler is not None else backend
        # in_process: the sampler is a front of `backend` itself (a batcher): no publishing.
        self.remote = sampler is not None and sampler is not backend and not in_process
        if self.remote and adapters_dir is None:
            raise ValueError("a remote sampler needs adapters_dir to publish hero versions to")
        self.adapters_dir = Path(adapters_dir) if adapters_dir is not None else None
        self.prefix = prefix
        self.slots = slots
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        if mode not in ("generate", "constrained"):
            raise ValueError(f"the hero trains in mode generate or constrained, not {mode!r}")
        self.mode = mode
        if self.TRAIN_ADAPTER not in backend.list_adapters():
            backend.add_adapter(self.TRAIN_ADAPTER)
        self._params = backend.trainable_parameters(self.TRAIN_ADAPTER)
        self.version = 0
        self._published: tuple[int, ...] | None = None
        self.live_adapter = self.TRAIN_ADAPTER if not self.remote else ""
        tokenizer = backend.tokenizer
        self.render: Callable[[str], str] = lambda prompt: render_prompt(tokenizer, prompt)

    # --------------------------------------------------------------- publishing
    def _weights_version(self) -> tuple[int, ...]:
        # In-place updates (optimizer steps, load) bump each tensor's version counter.
        return tuple(p._version for p in self._params)

    def publish(self) -> str:
        """Make the sampler use the current weights; returns the adapter name to sample with.

        In-process this is the training adapter itself. With a remote sampler the weights are
        saved as the next ``{prefix}-vNNNN`` (immutable), loaded there, and the superseded
        version is unloaded.
        """
        if not self.remote:
            return self.live_adapter
        current = self._weights_version()
        if current == self._published and self.live_adapter:
            return self.live_adapter
        assert self.adapters_dir is not None
        self.version += 1
        name = versioned_name(self.prefix, self.version)
        folder = self.backend.save_adapter(self.TRAIN_ADAPTER, self.adapters_dir / name)
        # The saved config names the training adapter; the server knows it by `name`.
        previous = self.live_adapter
        if self.slots is not None:
            self.slots.ensure({name: str(folder)})
            self.slots.pinned.add(name)
            if previous:
                self.slots.retire(previous)
        else:
            self.sampler.load_adapter(name, str(folder))
            if previous:
                self.sampler.unload_adapter(previous)
        self.live_adapter = name
        self._published = current
        return name

    # ------------------------------------------------------------------ playing
    def actor(self, *, seed: int, temperature: float | None = None, greedy: bool = False):
        """One seat (any power) playing the current hero weights; records every completion."""
        adapter = self.publish()
        temp = 0.0 if greedy else (self.temperature if temperature is None else temperature)
        table = LLMTable(
            self.sampler,
            {},
            record_adapter=adapter,
            max_new_tokens=self.max_new_tokens,
            temperature=temp,
            seed=seed,
            render=self.render,
            mode=self.mode,
        )
        table.solo, table.solo_adapter = True, adapter
        return LLMPolicy(table)

    def table(
        self,
        power_adapters: Mapping[str, str | None],
        *,
        seed: int,
        hero_name: str = "hero",
        temperature: float | None = None,
        greedy: bool = False,
    ) -> LLMTable:
        """All LLM seats of one game, batched; seats named ``hero_name`` play the live hero."""
        adapter = self.publish()
        seating = {p: (adapter if a == hero_name else a) for p, a in power_adapters.items()}
        temp = 0.0 if greedy else (self.temperature if temperature is None else temperature)
        return LLMTable(
            self.sampler,
            seating,
            record_adapter=adapter,
            max_new_tokens=self.max_new_tokens,
            temperature=temp,
            seed=seed,
            render=self.render,
            mode=self.mode,
        )

    # ----------------------------------------------------------------- training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The hero adapter's LoRA matrices (the only parameters that require gradients)."""
        self._params = self.backend.trainable_parameters(self.TRAIN_ADAPTER)
        return list(self._params)

    @staticmethod
    def record_size(record: ActionRecord) -> int:
        """A record's rough length (prompt characters + completion tokens): the trainer's
        gradient-accumulation passes group records of similar length."""
        payload = record.payload
        return len(payload.prompt) + len(payload.token_ids)

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` log-prob of each record's completion under the current hero weights."""
        per_token = payload_log_probs(
            self.backend, [r.payload for r in records], self.TRAIN_ADAPTER
        )
        if not per_token:
            return torch.zeros((0,), dtype=torch.float32)
        return torch.stack([t.sum() for t in per_token]).float()

    def reference(self) -> BasePolicy:
        """The frozen base model (no adapter) as a policy: the anchor of ``train.kl_coef``."""
        return BasePolicy(self.backend)

    def save(self, path: str | Path) -> Path:
        """Write the hero adapter as a peft folder (what vLLM and :meth:`load` read)."""
        return self.backend.save_adapter(self.TRAIN_ADAPTER, path, overwrite=True)

    def load(self, path: str | Path) -> None:
        """Copy the weights of the adapter folder ``path`` into the hero adapter."""
        scratch = f"lz_load_{uuid.uuid4().hex[:12]}"
        try:
            self.backend.load_adapter(scratch, path)
        except Exception as err:
            raise ValueError(f"cannot load hero adapter from {path}: {err}") from None
        try:
            source = self.backend.adapter_parameters(scratch)
            target = self.backend.adapter_parameters(self.TRAIN_ADAPTER)
            marker, own = f".{scratch}.", f".{self.TRAIN_ADAPTER}."
            with torch.no_grad():
                for name, param in target.items():
                    other = source.get(name.replace(own, marker))
                    if other is None or other.shape != param.shape:
                        raise ValueError(f"adapter {path} does not match the hero's LoRA shape")
                    param.copy_(other)
        finally:
            self.backend.unload_adapter(scratch)


class BasePolicy:
    """The base model without any adapter, scoring records (the KL reference; no gradients)."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` log-prob of each record's completion under the base model."""
        with torch.no_grad():
            per_token = payload_log_probs(self.backend, [r.payload for r in records], None)
        if not per_token:
            return torch.zeros((0,), dtype=torch.float32)
        return torch.stack([t.sum() for t in per_token]).float()
