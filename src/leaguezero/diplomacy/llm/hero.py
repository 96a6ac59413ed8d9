"""The hero's LoRA adapter as a GRPO policy (:class:`~leaguezero.diplomacy.train.grpo.GRPOPolicy`).

:class:`LLMHero` trains the hero adapter on an
:class:`~leaguezero.diplomacy.llm.model.hf_backend.HFBackend`: ``actor`` (one seat), ``table`` (all
LLM seats of a game, batched, :class:`~.tables.LLMTable`), ``log_prob`` (differentiable, hero
adapter only), ``trainable_parameters``, ``save``/``load`` of adapter folders. When sampling happens
on a server (vLLM), the trained weights are published lazily as a new immutable version
(``hero-v0001``, ...) before the next game, and the superseded version is unloaded.
:class:`BasePolicy` is the frozen base model, the KL reference.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec
from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.llm.client import GenerationClient
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.decoding import GENERATE, Decoding, LLMPayload
from leaguezero.diplomacy.llm.orders.prompt import ChatFormat
from leaguezero.diplomacy.llm.remote.adapters import AdapterSlots, versioned_name
from leaguezero.diplomacy.llm.tables import LLMPolicy, LLMTable


def payload_log_probs(
    backend: HFBackend,
    payloads: Sequence[LLMPayload],
    adapter: str | None,
    at_temperature: bool = True,
) -> list[torch.Tensor]:
    """Per-token log-probs of recorded completions under ``adapter``, each under the
    constraint it was sampled with (if any) and, with ``at_temperature``, at the temperature
    it was sampled at (``train.score_temperature: sampling``): the policy that played,
    recomputed. Without it, at temperature 1 whatever the sampling temperature (the trainer
    before issue 39: off-policy when ``train.temperature`` is not 1)."""
    allowed = [backend.allowed_tokens(p.choices, p.token_ids) for p in payloads]
    temps = [p.temperature if at_temperature and p.temperature > 0 else 1.0 for p in payloads]
    return backend.logprobs(
        [p.prompt for p in payloads],
        [p.token_ids for p in payloads],
        adapter,
        allowed if any(a is not None for a in allowed) else None,
        temps,
    )


class LLMHero:
    """The hero's LoRA adapter as a GRPO policy (see module doc).

    ``backend``: where the adapter is trained (and sampled, unless ``sampler`` is given);
    ``sampler``: a client that samples games (e.g.
    :class:`~leaguezero.diplomacy.llm.remote.openai_client.OpenAIClient` to vLLM), which gets each
    trained version as ``{prefix}-v{NNNN}`` saved under ``adapters_dir`` (a path the sampler's
    server can read); ``slots``: the sampler's adapter slots (the live hero version is pinned).
    ``in_process``: ``sampler`` runs on ``backend`` itself (e.g. a
    :class:`~leaguezero.diplomacy.llm.model.batching.BatchingGenerator` front), so the training
    adapter is sampled directly and nothing is published. ``decoding``: a trainable strategy of
    :mod:`~leaguezero.diplomacy.llm.orders.decoding` (constrained: every order legal, log-probs over
    the allowed tokens). ``chat``: how prompts are wrapped in the chat template (system prompt,
    template arguments; default one user turn); the completions are scored again on the very text
    rendered. ``score_at_temperature``: the trainer (and the KL reference) score each completion at
    the temperature it was sampled at (``train.score_temperature``). ``seed``: the new training
    adapter's initial weights (its A; B starts at 0) drawn from it, so a run's start does not
    depend on what the process drew before.
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
        decoding: Decoding = GENERATE,
        chat: ChatFormat | None = None,
        score_at_temperature: bool = True,
        seed: int | None = None,
    ) -> None:
        self.backend = backend
        self.score_at_temperature = score_at_temperature
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
        if not decoding.trainable:
            raise ValueError(
                f"the hero trains in mode generate or constrained, not {decoding.name!r}"
            )
        self.decoding = decoding
        if self.TRAIN_ADAPTER not in backend.list_adapters():
            backend.add_adapter(self.TRAIN_ADAPTER, seed=seed)
        self._params = backend.trainable_parameters(self.TRAIN_ADAPTER)
        self.version = 0
        self._published: tuple[int, ...] | None = None
        self.live_adapter = self.TRAIN_ADAPTER if not self.remote else ""
        self.chat = chat or ChatFormat()
        self.render: Callable[[str], str] = self.chat.renderer(backend.tokenizer)

    # --------------------------------------------------------------- publishing
    def weights_version(self) -> tuple[int, ...]:
        """The training adapter's weights' identity: in-place updates (optimizer steps, a
        load) bump each tensor's version counter, so it changes with every update."""
        return tuple(p._version for p in self._params)

    def publish(self) -> str:
        """Make the sampler use the current weights; returns the adapter name to sample with.

        In-process this is the training adapter itself. With a remote sampler the weights are
        saved as the next ``{prefix}-vNNNN`` (immutable), loaded there, and the superseded
        version is unloaded.
        """
        if not self.remote:
            return self.live_adapter
        current = self.weights_version()
        if current == self._published and self.live_adapter:
            if self.slots is not None and self.adapters_dir is not None:
                # Still loaded as the folder it names? (A restarted server forgot it; another
                # run may have loaded other weights under it.) One model listing per game.
                live = self.live_adapter
                self.slots.ensure({live: str(self.adapters_dir / live)})
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
            decoding=self.decoding,
        )
        table.solo, table.solo_adapter = True, adapter
        return LLMPolicy(table)

    def table(
        self,
        seating: Mapping[str, AgentSpec],
        *,
        seed: int,
        temperature: float | None = None,
        greedy: bool = False,
    ) -> LLMTable:
        """All LLM seats of one game, batched; the hero's seats (its kind, ``hero``) play the
        live hero, served as its published version."""
        adapter = self.publish()
        seating = {
            p: s.served_as(adapter) if s.kind is AgentKind.HERO else s for p, s in seating.items()
        }
        temp = 0.0 if greedy else (self.temperature if temperature is None else temperature)
        return LLMTable(
            self.sampler,
            seating,
            record_adapter=adapter,
            max_new_tokens=self.max_new_tokens,
            temperature=temp,
            seed=seed,
            render=self.render,
            decoding=self.decoding,
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

    def token_log_probs(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Each record's per-token log-probs ``[T_i]`` under the current hero weights."""
        per_token = payload_log_probs(
            self.backend,
            [r.payload for r in records],
            self.TRAIN_ADAPTER,
            self.score_at_temperature,
        )
        return [t.float() for t in per_token]

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` log-prob of each record's completion under the current hero weights."""
        return _sums(self.token_log_probs(records))

    def reference(self) -> BasePolicy:
        """The frozen base model (no adapter) as a policy: the anchor of ``train.kl_coef``."""
        return BasePolicy(self.backend, at_temperature=self.score_at_temperature)

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


def _sums(per_token: Sequence[torch.Tensor]) -> torch.Tensor:
    if not per_token:
        return torch.zeros((0,), dtype=torch.float32)
    return torch.stack([t.sum() for t in per_token]).float()


class BasePolicy:
    """The base model without any adapter, or with the frozen ``adapter``, scoring records (the
    KL reference; no gradients), at each record's sampling temperature with
    ``at_temperature`` (as the hero scores them)."""

    def __init__(
        self, backend: HFBackend, adapter: str | None = None, *, at_temperature: bool = True
    ) -> None:
        self.backend = backend
        self.adapter = adapter
        self.at_temperature = at_temperature

    def token_log_probs(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Each record's per-token log-probs under the base model (or adapter)."""
        with torch.no_grad():
            payloads = [r.payload for r in records]
            per_token = payload_log_probs(self.backend, payloads, self.adapter, self.at_temperature)
        return [t.float() for t in per_token]

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` log-prob of each record's completion under the base model (or adapter)."""
        return _sums(self.token_log_probs(records))
