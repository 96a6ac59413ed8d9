"""Generation for :class:`~.hf_backend.HFBackend`: adapters mixed per row, our own sampling
loop over the KV cache (:mod:`.sampler`) rather than ``model.generate``, constrained decoding
(:mod:`~leaguezero.diplomacy.llm.orders.constrained`).

A generation call may mix adapters row by row (peft's ``adapter_names=[...]``; ``__base__`` is
the bare model), so the seven seats of a game, or many games, go through one forward pass per
token (a batch of one adapter takes peft's faster plain path).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from leaguezero.common.memory import release_freed_memory
from leaguezero.diplomacy.llm.client import Completion, GenerationRequest, LLMError, make_requests
from leaguezero.diplomacy.llm.model.cpu_speed import Float32Head
from leaguezero.diplomacy.llm.model.sampler import growing_cache, sample_batch
from leaguezero.diplomacy.llm.orders.constrained import (
    ConstraintCompiler,
    Machine,
    OrderChoices,
    RegexMachine,
    replay_allowed,
)


class Sampling:
    """:class:`~.hf_backend.HFBackend`'s generation methods (a mixin); the switches and token
    ids they read are set by its constructor, the adapter methods come from
    :class:`~.hf_adapters.AdapterSlots`."""

    def generate(
        self,
        prompts: Sequence[str],
        adapters: Sequence[str | None],
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: Sequence[OrderChoices | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, adapters mixed per row (see
        :mod:`~leaguezero.diplomacy.llm.client`); ``choices[i]``: row ``i`` is decoded under that
        constraint (:mod:`~leaguezero.diplomacy.llm.orders.constrained`)."""
        rows = make_requests(prompts, adapters, max_new_tokens, temperature, seed, choices)
        return self.generate_rows(rows)

    def generate_rows(self, rows: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete requests that may differ in adapter, length, temperature and seed."""
        # The server tokenises in its request threads (extra["prompt_ids"]), not in the batcher's.
        encoded = [list(r.extra.get("prompt_ids") or self.encode(r.prompt)) for r in rows]
        for r, ids in zip(rows, encoded, strict=True):
            if r.max_new_tokens < 1:
                raise ValueError("max_new_tokens must be at least 1")
            if len(ids) + r.max_new_tokens > self.max_positions:
                raise LLMError(
                    f"prompt of {len(ids)} tokens + {r.max_new_tokens} new tokens exceeds the "
                    f"model's {self.max_positions} positions"
                )
        # Similar lengths share a batch: less padding.
        order = sorted(range(len(rows)), key=lambda i: len(encoded[i]))
        out: list[Completion | None] = [None] * len(rows)
        with self._lock, torch.no_grad():
            self._mode_for(False)
            names = [self._row_name(r.adapter) for r in rows]
            for start in range(0, len(order), self.max_batch_size):
                chunk = order[start : start + self.max_batch_size]
                done = self._sample(
                    [rows[i] for i in chunk], [encoded[i] for i in chunk], [names[i] for i in chunk]
                )
                for i, completion in zip(chunk, done, strict=True):
                    out[i] = completion
            # The batch's KV cache and activations, freed, go back to the system now: glibc
            # keeps them otherwise, and a step's games grew the process by GBs (common.memory).
            release_freed_memory()
        return [c for c in out if c is not None]

    def _sample(
        self, rows: list[GenerationRequest], encoded: list[list[int]], names: list[str]
    ) -> list[Completion]:
        """One batch: peft's plain path when every row uses one adapter, else its per-row one."""
        keys = [self._adapter_version(name) for name in names]
        if len(set(names)) == 1:  # one adapter for all rows: peft's plain path is faster
            with self._one_adapter(names[0]):
                return self._sample_rows(rows, encoded, None, keys)
        return self._sample_rows(rows, encoded, names, keys)

    def _sample_rows(
        self,
        rows: list[GenerationRequest],
        encoded: list[list[int]],
        names: list[str] | None,
        keys: list[tuple],
    ) -> list[Completion]:
        """Sample one batch over the KV cache (:func:`.sampler.sample_batch`) and decode it;
        ``names``: each row's adapter for peft's per-row path, None when the active adapter
        serves all; ``keys``: each row's adapter version
        (:meth:`~.hf_adapters.AdapterSlots._adapter_version`)."""

        head = self.model.get_output_embeddings()
        head = head if isinstance(head, Float32Head) and self.select_logits else None

        def forward(adapter_rows, **kwargs):
            row_names = None if names is None else [names[i] for i in adapter_rows]
            if head is None:
                return self._forward(adapter_names=row_names, **kwargs)
            head.hidden_only = True  # the sampler asks for the logits it needs (.cpu_speed)
            try:
                return self._forward(adapter_names=row_names, **kwargs)
            finally:
                head.hidden_only = False

        config = self.model.get_base_model().config
        packed = None
        if self.packed_prefill and self.growing_cache:
            heads = config.num_attention_heads
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            dim = getattr(config, "head_dim", None) or config.hidden_size // heads
            dtype = torch.float32 if self.float32_cache else self.model.dtype
            packed = (kv_heads, dim, dtype)
        tokens, logprobs, finish = sample_batch(
            forward,
            rows,
            encoded,
            [self._machine(r) for r in rows],
            pad_id=self.pad_id,
            eos_ids=self.eos_ids,
            jump_forward=self.jump_forward,
            device=self.device,
            cache_arg=self.cache_arg,
            new_cache=(
                (lambda: growing_cache(config, float32=self.float32_cache))
                if self.growing_cache
                else None
            ),
            head=None if head is None else head.logits,
            prefix_cache=self.prefix_cache if self.growing_cache else None,
            row_keys=keys,
            packed=packed,
        )
        completions = []
        for b, r in enumerate(rows):
            text_ids = [t for t in tokens[b] if t not in self.eos_ids]
            text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
            completions.append(
                Completion(text, tokens[b], logprobs[b], finish[b], len(encoded[b]), r.adapter)
            )
        return completions

    @property
    def constraints(self) -> ConstraintCompiler:
        """Regular expressions compiled to this tokenizer's token masks
        (:mod:`~leaguezero.diplomacy.llm.orders.constrained`)."""
        with self._compiler_lock:
            if self._compiler is None:
                self._compiler = ConstraintCompiler(self.tokenizer, self.eos_id)
            return self._compiler

    def _machine(self, row: GenerationRequest) -> Machine | None:
        if (index := row.extra.get("regex_index")) is not None:  # llm serve's (.regex_sandbox)
            return RegexMachine(index, self.constraints.eos_id)
        choices = row.extra.get("choices")
        if choices is not None:  # an order list: the token trie's walk (.mask_replay)
            return self.constraints.order_machine(choices)
        regex = row.extra.get("regex")
        return None if regex is None else self.constraints.machine(regex)

    def allowed_tokens(
        self, choices: OrderChoices | None, token_ids: Sequence[int]
    ) -> list[list[int]] | None:
        """The allowed set at each position of a completion decoded under ``choices``."""
        if choices is None:
            return None
        return replay_allowed(self.constraints, choices, token_ids)
