"""LLM agents in the league loop (``train.agent: llm``) and in its evaluations.

- :func:`backend_from_config` loads the ``llm`` section's base model into an
  :class:`~.hf_backend.HFBackend` (in-process transformers + peft; nothing is downloaded).
- :class:`LLMLeagueHero` is what :class:`~leaguezero.diplomacy.train.LeagueTrainer` holds for
  an LLM hero: the :class:`~.agent.LLMHero` (its training adapter is the GRPO policy), the
  opponents' adapters loaded by their league names from the registry's checkpoint folders
  (at most ``llm.max_loras`` resident, least recently used unloaded), and one
  :class:`~.agent.LLMTable` per game so every LLM seat of a phase is sampled in one batch.
- :func:`adapter_resolver` is the evaluator's resolver for adapter checkpoints: each seat is a
  standalone LLM actor of its agent's adapter (``base_model`` = no adapter).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

import torch

from leaguezero.diplomacy.agents import BASE_MODEL, AgentResolver, UnknownAgentError
from leaguezero.diplomacy.bots import BOTS
from leaguezero.diplomacy.config import DiplomacyConfig, LLMSection
from leaguezero.diplomacy.llm.adapters import AdapterSlots
from leaguezero.diplomacy.llm.agent import LLMHero, LLMPolicy, LLMTable
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.hf_backend import HFBackend, LoraSettings


def uses_adapter(name: str | None) -> bool:
    """Whether a seat's agent is a LoRA adapter (bots and the base model are not)."""
    return name is not None and name != BASE_MODEL and name not in BOTS


def backend_from_config(llm: LLMSection) -> HFBackend:
    """The ``hf`` backend of ``llm.base_model`` with the section's LoRA shape, device, dtype.

    Raises :class:`~.client.LLMError` with one line when the section cannot be trained here
    (no base model folder, or the ``openai`` backend, which the loop does not drive yet).
    """
    if llm.backend != "hf":
        raise LLMError(
            f"train.agent=llm trains with llm.backend=hf only (got {llm.backend!r}); sampling "
            "through an OpenAI-compatible server is not wired into the league loop yet"
        )
    if llm.base_model is None:
        raise LLMError(
            "train.agent=llm needs llm.base_model: a local folder with a causal LM and its "
            "tokenizer (save_pretrained); nothing is downloaded"
        )
    if llm.device == "cpu":
        torch.set_num_threads(1)  # shared 2-core machines (DESIGN.md)
    lora = LoraSettings(
        rank=llm.lora_rank,
        alpha=llm.lora_alpha,
        dropout=llm.lora_dropout,
        target_modules=list(llm.target_modules),
        max_lora_rank=llm.max_lora_rank,
    )
    try:
        return HFBackend.from_pretrained(
            llm.base_model, lora=lora, device=llm.device, dtype=llm.dtype
        )
    except (OSError, ValueError) as err:
        raise LLMError(f"cannot load base model {llm.base_model}: {err}") from None


class LLMLeagueHero:
    """The LLM hero of a league run (see module doc); ``hero`` is the GRPO policy."""

    def __init__(self, cfg: DiplomacyConfig, hero_name: str = "hero") -> None:
        self.backend = backend_from_config(cfg.llm)
        self.hero = LLMHero(
            self.backend,
            max_new_tokens=cfg.llm.max_new_tokens,
            temperature=cfg.train.temperature,
        )
        self.hero_name = hero_name
        # The training adapter takes one of the max_loras slots for good.
        self.slots = AdapterSlots(self.backend, cfg.llm.max_loras, pinned={LLMHero.TRAIN_ADAPTER})

    def weights(self) -> dict[str, torch.Tensor]:
        """A copy of the hero adapter's LoRA tensors, by parameter name (for ``state.pt``)."""
        params = self.backend.adapter_parameters(LLMHero.TRAIN_ADAPTER)
        return {name: p.detach().clone() for name, p in params.items()}

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy tensors saved by :meth:`weights` into the hero adapter (in place)."""
        params = self.backend.adapter_parameters(LLMHero.TRAIN_ADAPTER)
        if set(params) != set(weights):
            raise ValueError("saved hero adapter weights do not match this run's LoRA shape")
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(weights[name])

    def table(
        self,
        seating: Mapping[str, str],
        adapter_paths: Mapping[str, str | Path],
        *,
        seed: int,
        temperature: float,
    ) -> LLMTable:
        """One game's LLM seats: loads the opponents' adapters, then seats the live hero.

        ``seating``: ``{power: agent}`` with ``hero_name`` for the live weights;
        ``adapter_paths``: ``{league name: adapter folder}`` of every adapter opponent seated.
        """
        self.slots.ensure({name: str(path) for name, path in adapter_paths.items()})
        return self.hero.table(
            seating, seed=seed, hero_name=self.hero_name, temperature=temperature
        )


def adapter_resolver(
    backend: HFBackend,
    paths: Mapping[str, str | Path],
    *,
    seed: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
) -> AgentResolver:
    """A resolver that plays league adapters (and the base model) on ``backend``, one per seat.

    Each adapter is loaded once under its league name; every call gets a standalone actor with
    the next seed (seats are sampled one by one, not batched). Raises ``UnknownAgentError``
    for an adapter name not in ``paths``.
    """
    counter = itertools.count()

    def resolve(name: str | None) -> LLMPolicy:
        adapter = name if uses_adapter(name) else None
        if adapter is not None and adapter not in backend.list_adapters():
            if adapter not in paths:
                raise UnknownAgentError(f"no adapter folder for agent {adapter!r}")
            backend.load_adapter(adapter, paths[adapter])
        table = LLMTable(
            backend,
            {},
            max_new_tokens=max_new_tokens,
            temperature=0.0 if greedy else temperature,
            seed=seed * 1_000_003 + next(counter),
        )
        table.solo, table.solo_adapter = True, adapter
        return LLMPolicy(table)

    return resolve
