"""LLM agents in the league loop (``train.agent: llm``) and in its evaluations.

- :func:`backend_from_config` loads the ``llm`` section's base model into an
  :class:`~.hf_backend.HFBackend` (in-process transformers + peft; nothing is downloaded); the
  trainer always holds one for the gradients.
- :class:`LLMLeagueHero` is what :class:`~leaguezero.diplomacy.train.heroes.LanguageModelHero`
  holds: the :class:`~.agent.LLMHero` (its training adapter is the GRPO policy), sampling in
  process (through a batcher) or on an OpenAI-compatible server (``llm.backend: openai``: vLLM
  or ``leaguezero llm serve``; each update published and hot-loaded as a new version), the
  opponents' adapters loaded by their league names within ``llm.max_loras``, and
  :meth:`~LLMLeagueHero.play_group`: a group's games at once, one thread each, so every LLM
  seat of every game meets in the sampler's batches.
- :func:`adapter_resolver` / :func:`evaluation_resolver_factory`: the evaluator's agents
  (adapters on the in-process base, or on the run's server under their own names).
- :func:`folder_resolver`: LLM folders (a base model, adapters on it) as agents of
  ``leaguezero diplomacy eval``.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from leaguezero.diplomacy.config import DiplomacyConfig, LLMSection
from leaguezero.diplomacy.game.bots import BOTS
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout
from leaguezero.diplomacy.game.seats import BASE_MODEL, AgentResolver, UnknownAgentError
from leaguezero.diplomacy.llm.adapters import (
    AdapterSlots,
    SlotsExceededError,
    fit_seating,
    parse_versioned_name,
)
from leaguezero.diplomacy.llm.agent import LLMHero, LLMTable, SeatStats, SharedTables
from leaguezero.diplomacy.llm.batching import BatchingGenerator
from leaguezero.diplomacy.llm.client import GenerationClient, LLMError
from leaguezero.diplomacy.llm.hf_backend import HFBackend, LoraSettings
from leaguezero.diplomacy.llm.openai_client import OpenAIClient
from leaguezero.diplomacy.train.grpo import ActionRecord


def uses_adapter(name: str | None) -> bool:
    """Whether a seat's agent is a LoRA adapter (bots and the base model are not)."""
    return name is not None and name != BASE_MODEL and name not in BOTS


def backend_from_config(llm: LLMSection) -> HFBackend:
    """The ``hf`` backend of ``llm.base_model`` with the section's LoRA shape, device, dtype.

    The trainer always holds the base model in process (it computes the gradients); with
    ``llm.backend: openai`` only the sampling goes to the server. Raises
    :class:`~.client.LLMError` with one line when there is no base model folder.
    """
    if llm.base_model is None:
        raise LLMError(
            "train.agent=llm needs llm.base_model: a local folder with a causal LM and its "
            "tokenizer (save_pretrained, or `leaguezero llm pretrain --out DIR`); nothing is "
            "downloaded"
        )
    lora = LoraSettings(
        rank=llm.lora_rank,
        alpha=llm.lora_alpha,
        dropout=llm.lora_dropout,
        target_modules=list(llm.target_modules),
        max_lora_rank=llm.max_lora_rank,
    )
    try:
        return HFBackend.from_pretrained(
            llm.base_model,
            lora=lora,
            device=llm.device,
            dtype=llm.dtype,
            bf16_autocast=llm.bf16_autocast,
        )
    except (OSError, ValueError) as err:
        raise LLMError(f"cannot load base model {llm.base_model}: {err}") from None


def server_client(llm: LLMSection) -> OpenAIClient:
    """An :class:`~.openai_client.OpenAIClient` for ``llm.endpoint`` (vLLM or ``llm serve``)."""
    client = OpenAIClient(llm.endpoint, base_model=llm.served_model_name)
    try:
        client.models()
    except LLMError as err:
        client.close()
        raise LLMError(
            f"{err}; start the server first (`leaguezero llm serve --base-model "
            f"{llm.base_model} --max-loras {llm.max_loras}` or vLLM, docs/llm.md)"
        ) from None
    return client


@dataclass
class HeroGame:
    """One finished game of the hero: the rollout, the records of every seat the live hero
    played (the hero power and its mirror seats), each LLM seat's stats, the seating."""

    result: RolloutResult
    records: list[ActionRecord]
    stats: dict[str, SeatStats]
    seating: dict[str, str]


class LLMLeagueHero:
    """The LLM hero of a league run (see module doc); ``hero`` is the GRPO policy.

    ``run_dir``: the run folder (published hero versions go to ``run_dir/llm.adapters_dir``,
    which an ``openai`` server must be able to read).
    """

    def __init__(
        self, cfg: DiplomacyConfig, hero_name: str = "hero", run_dir: str | Path = "."
    ) -> None:
        llm = cfg.llm
        self.backend = backend_from_config(llm)
        self.remote = llm.backend == "openai"
        self.client: OpenAIClient | None = None
        if self.remote:
            self.client = server_client(llm)
            sampler: GenerationClient = self.client
            self.slots = AdapterSlots(self.client, llm.max_loras, owned_only=True)
        else:
            # Games of a group run in threads; their rows meet in one batch per forward pass.
            self.batcher = BatchingGenerator(self.backend, max_batch=64, wait_s=0.05)
            sampler = _InProcess(self.batcher, self.backend)
            # The training adapter takes one of the max_loras slots for good.
            self.slots = AdapterSlots(
                self.backend, llm.max_loras, pinned={LLMHero.TRAIN_ADAPTER}, owned_only=True
            )
        adapters_dir = Path(run_dir) / llm.adapters_dir
        # Served names are unique per run (several runs may share one server; vLLM caches an
        # adapter by its name forever) and go on counting after a resume.
        prefix = re.sub(r"[^A-Za-z0-9_]+", "_", Path(run_dir).resolve().name).strip("_")
        prefix = f"{prefix or 'run'}-hero"
        self.hero = LLMHero(
            self.backend,
            sampler=sampler,
            adapters_dir=adapters_dir,
            prefix=prefix,
            slots=self.slots,
            max_new_tokens=llm.max_new_tokens,
            temperature=cfg.train.temperature,
            in_process=not self.remote,
            mode=llm.mode,
        )
        if self.remote and self.client is not None:
            versions = [parse_versioned_name(p.name) for p in adapters_dir.glob(f"{prefix}-v*")]
            self.hero.version = max((v[1] for v in versions if v), default=0)
            for name in self.client.list_adapters():  # left loaded by an earlier process
                parsed = parse_versioned_name(name)
                if parsed is not None and parsed[0] == prefix:
                    self.client.unload_adapter(name)
        self.hero_name = hero_name
        self.format_penalty = llm.format_penalty

    def close(self) -> None:
        """Stop the batcher or close the server connection."""
        if self.client is not None:
            self.client.close()
        else:
            self.batcher.close()

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

    def play_group(
        self,
        game_cfg: DiplomacyConfig,
        group_idx: int,
        seating: Mapping[str, str],
        hero_power: str,
        adapter_paths: Mapping[str, str | Path],
        *,
        seeds: Sequence[int],
        temperature: float,
    ) -> list[HeroGame]:
        """Play the group's games at once (one thread each), so their requests share batches.

        Every game has the same seating; ``seeds[i]`` seeds game ``i``'s sampling. When the
        server refuses an adapter (slots or memory), the table falls back to cluster seating
        with fewer distinct adapters (:func:`~.adapters.fit_seating`).
        """
        seating = self.prepare(seating, hero_power, adapter_paths)
        tables = [
            self.hero.table(seating, seed=seed, hero_name=self.hero_name, temperature=temperature)
            for seed in seeds
        ]

        def play(game_idx: int) -> RolloutResult:
            table = tables[game_idx]
            return run_rollout(
                game_cfg, group_idx, game_idx, table.seating, hero_power, resolver=table.resolver
            )

        with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="dip-game") as pool:
            results = list(pool.map(play, range(len(tables))))
        return [
            HeroGame(result, list(table.records), dict(table.stats), seating)
            for table, result in zip(tables, results, strict=True)
        ]

    def prepare(
        self, seating: Mapping[str, str], hero_power: str, adapter_paths: Mapping[str, str | Path]
    ) -> dict[str, str]:
        """Publish the live hero and load the table's adapter opponents; returns the seating,
        reseated with fewer distinct adapters when the sampler cannot hold them all."""
        seating = dict(seating)
        adapter_paths = dict(adapter_paths)
        self.hero.publish()  # the live hero's slot first: opponents take what is left
        while True:
            try:
                self.slots.ensure({n: str(p) for n, p in adapter_paths.items()})
                return seating
            except SlotsExceededError:
                if len(adapter_paths) == 0:
                    raise
                seating, adapter_paths = self._fewer_adapters(seating, hero_power, adapter_paths)

    def remote_games(self, llm: LLMSection, temperature: float) -> RemoteLLMGames:
        """What a remote worker needs to play the hero's games on the server (after
        :meth:`prepare`): the endpoint, the tokenizer's folder, the live hero's served name."""
        if not self.remote:
            raise LLMError("games on remote workers need llm.backend=openai (a shared server)")
        return RemoteLLMGames(
            endpoint=llm.endpoint,
            served_model_name=self.client.base_model if self.client is not None else None,
            tokenizer_path=str(llm.base_model),
            hero_name=self.hero_name,
            hero_adapter=self.hero.live_adapter,
            max_new_tokens=llm.max_new_tokens,
            temperature=temperature,
            mode=llm.mode,
        )

    def _fewer_adapters(
        self, seating: dict[str, str], hero_power: str, paths: dict[str, str | Path]
    ) -> tuple[dict[str, str], dict[str, str | Path]]:
        """The seating with one distinct adapter opponent less (cluster seating)."""
        from leaguezero.diplomacy.game.env import POWERS

        opponents = [seating[p] for p in POWERS if p != hero_power]
        slots = 1 + len(paths) - 1  # the hero's version + one adapter opponent fewer
        # A stable seed (str hashes differ between processes): the same fallback every run.
        rng = random.Random(zlib.crc32("|".join([hero_power, *opponents]).encode()))
        seats = fit_seating(
            self.hero_name,
            opponents,
            max_loras=max(1, slots),
            uses_slot=lambda n: n == self.hero_name or uses_adapter(n),
            rng=rng,
            hero_seat=POWERS.index(hero_power),
        )
        new = dict(zip(POWERS, seats, strict=True))
        return new, {n: p for n, p in paths.items() if n in new.values()}

    def seat_reward(self, game: HeroGame, power: str) -> float:
        """The GRPO reward of ``power``'s seat: its final score, less ``llm.format_penalty``
        times its invalid and missing orders per completion (0: off). Per completion, not a
        share of the orders owed, so a model that writes only junk still learns to write less."""
        score = game.result.scores[power]
        stats = game.stats.get(power)
        if self.format_penalty <= 0 or stats is None:
            return score
        bad = stats.invalid + stats.missing
        return score - self.format_penalty * bad / max(1, stats.completions)


@dataclass(frozen=True)
class RemoteLLMGames:
    """The shared part of a group's games played by remote workers (Ray) on one server."""

    endpoint: str
    served_model_name: str | None
    tokenizer_path: str
    hero_name: str
    hero_adapter: str
    max_new_tokens: int
    temperature: float
    mode: str = "generate"


@functools.cache
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def play_remote_game(
    shared: RemoteLLMGames,
    cfg_json: str,
    group_idx: int,
    game_idx: int,
    seating: dict[str, str],
    hero_power: str,
    seed: int,
) -> HeroGame:
    """One hero game on a worker (a pure function of its arguments): every LLM seat sampled
    on the server, the live hero as ``shared.hero_adapter``; returns the result, the live
    hero's records (all its seats), the seats' stats and the seating."""
    from leaguezero.diplomacy.llm.prompt import render_prompt

    cfg = DiplomacyConfig.model_validate_json(cfg_json)
    tokenizer = _tokenizer(shared.tokenizer_path)
    with OpenAIClient(shared.endpoint, base_model=shared.served_model_name) as client:
        table = LLMTable(
            client,
            {p: (shared.hero_adapter if a == shared.hero_name else a) for p, a in seating.items()},
            record_adapter=shared.hero_adapter,
            max_new_tokens=shared.max_new_tokens,
            temperature=shared.temperature,
            seed=seed,
            render=lambda prompt: render_prompt(tokenizer, prompt),
            mode=shared.mode,
        )
        result = run_rollout(
            cfg, group_idx, game_idx, table.seating, hero_power, resolver=table.resolver
        )
    return HeroGame(result, list(table.records), dict(table.stats), dict(seating))


class _InProcess:
    """The in-process sampler: generation through the batcher, adapters on the backend."""

    def __init__(self, batcher: BatchingGenerator, backend: HFBackend) -> None:
        self.batcher = batcher
        self.backend = backend

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed, choices=None):
        return self.batcher.generate(prompts, adapters, max_new_tokens, temperature, seed, choices)

    def load_adapter(self, name: str, path: str) -> None:
        self.backend.load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        self.backend.unload_adapter(name)

    def list_adapters(self) -> list[str]:
        return self.backend.list_adapters()


def adapter_resolver(
    client: GenerationClient,
    paths: Mapping[str, str | Path],
    *,
    seed: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    render: Callable[[str], str] | None = None,
    slots: AdapterSlots | None = None,
    prefix: str = "",
    mode: str = "generate",
) -> AgentResolver:
    """A resolver that plays league adapters (and the base model) on ``client``, one per seat.

    ``client``: an :class:`~.hf_backend.HFBackend` in process or an
    :class:`~.openai_client.OpenAIClient` (the evaluator of an ``openai`` run plays through the
    server too). Each adapter is loaded once as ``prefix + name`` (an evaluator sharing a
    server with the trainer uses its own names, ``{prefix}{name}-{hash of the folder}``, so
    neither unloads the other's adapters and runs sharing a server do not collide),
    through ``slots`` when given (at most ``max_loras`` of them resident); every call gets a
    seat of :class:`~.agent.SharedTables`, so a game's LLM seats are sampled together each
    phase (seeds from ``seed`` and the game's number). ``render``: the chat template (see
    :func:`~.prompt.render_prompt`); ``mode``: ``generate`` or ``constrained``. Raises
    ``UnknownAgentError`` for an adapter name not in ``paths``.
    """
    tables = SharedTables(
        lambda game: LLMTable(
            client,
            {},
            max_new_tokens=max_new_tokens,
            temperature=0.0 if greedy else temperature,
            seed=seed * 1_000_003 + game,
            render=render,
            mode=mode,
        )
    )

    def resolve(name: str | None):
        adapter = None
        if uses_adapter(name):
            if name not in paths:
                raise UnknownAgentError(f"no adapter folder for agent {name!r}")
            adapter = name
            if prefix:  # unique per folder: league names repeat across runs on one server
                digest = hashlib.sha1(str(Path(paths[name]).resolve()).encode()).hexdigest()
                adapter = f"{prefix}{name}-{digest[:8]}"
            if slots is not None:
                slots.ensure({adapter: str(paths[name])})
            elif adapter not in client.list_adapters():
                client.load_adapter(adapter, str(paths[name]))
        return tables.policy(adapter)

    return resolve


def evaluation_resolver_factory(llm: LLMSection):
    """For the evaluator's process: ``(make_resolver(paths, seed, greedy, temperature), close)``.

    ``hf``: the base model loaded here; ``openai``: the run's server, adapters loaded as
    ``eval-NAME-HASH`` within ``llm.max_loras`` and never unloading the trainer's. Prompts go
    through the base model's chat template either way.
    """
    from leaguezero.diplomacy.llm.prompt import render_prompt

    if llm.backend == "openai":
        from transformers import AutoTokenizer

        client = server_client(llm)
        tokenizer = AutoTokenizer.from_pretrained(llm.base_model, local_files_only=True)
        slots = AdapterSlots(client, llm.max_loras, owned_only=True)
        prefix, close = "eval-", client.close
        target: GenerationClient = client
    else:
        backend = backend_from_config(llm)
        tokenizer, slots, prefix, close, target = backend.tokenizer, None, "", lambda: None, backend

    def make(paths: Mapping[str, str | Path], *, seed: int, greedy: bool, temperature: float):
        return adapter_resolver(
            target,
            paths,
            seed=seed,
            greedy=greedy,
            temperature=temperature,
            max_new_tokens=llm.max_new_tokens,
            render=lambda prompt: render_prompt(tokenizer, prompt),
            slots=slots,
            prefix=prefix,
            mode=llm.mode,
        )

    return make, close


def is_llm_folder(path: str | Path) -> bool:
    """A base model folder (``config.json``) or a LoRA adapter folder (``adapter_config.json``)."""
    folder = Path(path)
    return folder.is_dir() and (
        (folder / "config.json").exists() or (folder / "adapter_config.json").exists()
    )


def folder_resolver(
    names: Sequence[str],
    llm: LLMSection,
    *,
    seed: int,
    greedy: bool,
    mode: str | None = None,
) -> AgentResolver | None:
    """Play agents given as folders (a base model, or adapters on it); None if there are none.

    The base model is ``llm.base_model``, else the one folder with a ``config.json`` among
    ``names``, else the base an adapter was saved from (its ``leaguezero_adapter.json``).
    Adapters are loaded once each; every seat is a standalone LLM actor with its own seed.
    ``mode``: ``generate``, ``constrained`` or ``rank`` (:mod:`.ranking`); None: ``llm.mode``.
    """
    import json

    from leaguezero.diplomacy.llm.prompt import render_prompt

    folders = [n for n in dict.fromkeys(names) if is_llm_folder(n)]
    if not folders:
        return None
    bases = [n for n in folders if (Path(n) / "config.json").exists()]
    adapters = [n for n in folders if n not in bases]
    base = llm.base_model or (bases[0] if bases else None)
    if base is None:
        meta = Path(adapters[0]) / "leaguezero_adapter.json"
        base = json.loads(meta.read_text())["base_model"] if meta.exists() else None
    if base is None:
        raise LLMError(f"which base model does {adapters[0]} go on? set llm.base_model=PATH")
    if len(bases) > 1 or (bases and Path(bases[0]).resolve() != Path(base).resolve()):
        raise LLMError("one base model per evaluation: the folders name different bases")
    backend = backend_from_config(llm.model_copy(update={"base_model": str(base)}))
    names_on_backend = {}
    for i, folder in enumerate(adapters):
        names_on_backend[folder] = f"agent{i}"
        backend.load_adapter(f"agent{i}", folder)
    tables = SharedTables(
        lambda game: LLMTable(
            backend,
            {},
            max_new_tokens=llm.max_new_tokens,
            temperature=0.0 if greedy else llm.temperature,
            seed=seed * 1_000_003 + game,
            render=lambda prompt: render_prompt(backend.tokenizer, prompt),
            mode=mode or llm.mode,
        )
    )

    def resolve(name: str | None):
        if name not in folders:
            raise UnknownAgentError(f"{name!r} is not a model or adapter folder")
        return tables.policy(names_on_backend.get(name))

    return resolve
