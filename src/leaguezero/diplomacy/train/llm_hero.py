"""A LoRA adapter on ``llm.base_model`` as the league hero (``train.agent: llm``).

:class:`LanguageModelHero` holds the GRPO policy (:class:`~leaguezero.diplomacy.llm.hero.LLMHero`,
the hero adapter on the in-process base model, which computes the gradients) and the sampler its
games use: in process through a batcher, or an OpenAI-compatible server (``llm.backend:
openai``: vLLM or ``leaguezero llm serve``; each update is published and hot-loaded as a new
version). A group's games run at once, one thread each, so every LLM seat of every game meets in
the sampler's batches (with ``train.play_processes`` > 1, helper processes play a share of
them beside the trainer: :mod:`.play_workers`); on Ray (a task map that is not in process) each
game is a task of :func:`~.llm_games.play_remote_game` sampling on the shared server. The
opponents' adapters are loaded by their league names within ``llm.max_loras`` (fewer distinct
ones, cluster-seated, when the sampler cannot hold them). Every game comes back as one
:class:`~leaguezero.diplomacy.game.records.PlayedGame` (:mod:`.llm_games`). ``base_model`` is the
base LM itself (no file); checkpoints are adapter folders.
"""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.memory import release_freed_memory
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentKind, Seating, seat_spec
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.records import PlayedGame
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout
from leaguezero.diplomacy.game.seats import UnknownAgentError
from leaguezero.diplomacy.llm.client import LLMError, grammar_alarm
from leaguezero.diplomacy.llm.hero import BasePolicy, LLMHero
from leaguezero.diplomacy.llm.model.adapter_files import adapter_file_mode
from leaguezero.diplomacy.llm.orders.decoding import Decoding, decoding_named
from leaguezero.diplomacy.llm.remote.adapters import (
    SlotsExceededError,
    check_adapter_fits,
    fit_seating,
    parse_versioned_name,
    run_prefix,
)
from leaguezero.diplomacy.llm.runtime import LLMRuntime
from leaguezero.diplomacy.train.heroes import TaskMap, TrainError, game_seed, local_map
from leaguezero.diplomacy.train.lineage import LINEAGE_FILE
from leaguezero.diplomacy.train.llm_games import (
    RemoteLLMGames,
    play_remote_game,
    played_game,
)
from leaguezero.diplomacy.train.llm_memory import PassPlan, hero_pass_plan
from leaguezero.diplomacy.train.play_workers import (
    HelperPlay,
    PlayWorkerError,
    play_processes,
    split_games,
)
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.session import HERO


class LanguageModelHero:
    """The LLM hero of a league run (see module doc); ``policy`` is the GRPO policy.

    ``run_dir``: the run folder (published hero versions go to ``run_dir/llm.adapters_dir``,
    which an ``openai`` server must be able to read). A task map that is not in process needs
    ``llm.backend: openai`` (raises :class:`~.heroes.TrainError`).
    """

    checkpoint_suffix = ""
    base_model_path = None
    INIT_ADAPTER = "hero_init"  # the frozen adapter a run started from (the KL reference)
    INIT_FOLDER = "init_adapter"  # its copy in the run folder (read again on --resume)

    def __init__(self, cfg: DiplomacyConfig, run_dir: Path, task_map: TaskMap = local_map) -> None:
        llm = cfg.llm
        self.remote = llm.sampling.shared_server
        if not task_map.in_process and not self.remote:
            raise TrainError(
                "train.agent=llm on Ray needs llm.backend=openai: the workers sample from one "
                "server (vLLM or leaguezero llm serve) that every node can reach"
            )
        self.play_processes = play_processes(cfg, self.remote, task_map.in_process)
        self.agent = cfg.train.hero.name
        self.cfg = cfg
        self.task_map = task_map
        self.decoding: Decoding = decoding_named(llm.mode)
        sized: list[PassPlan] = []

        def sampling_rows(backend) -> int:  # asked once the weights are in, if sampled here
            sized.append(hero_pass_plan(backend, cfg, sampled_here=True))
            return sized[0].sampling_rows

        try:
            # The weights (the gradients need them), the sampler and the adapter slots: in
            # process through a batcher, or the shared server.
            self.runtime = LLMRuntime(
                llm,
                trainer=True,
                gradient_checkpointing=cfg.train.gradient_checkpointing,
                sampling_rows=sampling_rows,
                pinned={LLMHero.TRAIN_ADAPTER},  # the training adapter's slot, for good
            )
        except LLMError as err:
            raise TrainError(str(err)) from None
        assert self.runtime.backend is not None
        self.backend = self.runtime.backend
        self.client = self.runtime.client
        plan = sized[0] if sized else hero_pass_plan(self.backend, cfg, sampled_here=False)
        self.records_per_pass: int | None = plan.records_per_pass
        self.memory_plan: str | None = plan.line()
        # A backward pass trims once the process is within a record of the budget.
        self.trim_above_gb: float | None = max(plan.budget_gb - plan.record_gb, 0.5)
        assert self.runtime.slots is not None
        self.slots = self.runtime.slots
        adapters_dir = Path(run_dir) / llm.adapters_dir
        # Served names are unique per run (several runs may share one server; vLLM caches an
        # adapter by its name forever) and go on counting after a resume.
        try:
            prefix = run_prefix(run_dir)
        except LLMError as err:
            raise TrainError(str(err)) from None
        # League checkpoints are served under the run's names too: two runs sharing a server
        # each have a `ckpt_000001` of their own (issue 39: names unique per run).
        self.league_prefix = prefix.removesuffix("-hero")
        self.policy = LLMHero(
            self.backend,
            sampler=self.runtime.sampler,
            adapters_dir=adapters_dir,
            prefix=prefix,
            slots=self.slots,
            max_new_tokens=llm.max_new_tokens,
            temperature=cfg.train.temperature,
            in_process=not self.remote,
            decoding=self.decoding,
            chat=self.runtime.chat,
            score_at_temperature=cfg.train.score_temperature == "sampling",
            seed=cfg.run.seed,
        )
        # train.play_processes: helpers play a share of each group (started at the first one)
        self.helpers = (
            HelperPlay(cfg, self.play_processes, self.policy, self.backend, plan.sampling_rows)
            if self.play_processes > 1
            else None
        )
        self.init_folder = Path(run_dir) / self.INIT_FOLDER
        self.has_init = False
        if self.init_folder.is_dir():  # a resumed run that started from an adapter
            self._load_init()
        if self.client is not None:
            self._go_on_from_served_versions(adapters_dir, prefix)

    def _go_on_from_served_versions(self, adapters_dir: Path, prefix: str) -> None:
        """A server's run counts its hero versions on from the folders published before, and
        unloads the versions an earlier process left loaded."""
        assert self.client is not None
        versions = [parse_versioned_name(p.name) for p in adapters_dir.glob(f"{prefix}-v*")]
        self.policy.version = max((v[1] for v in versions if v), default=0)
        for name in self.client.list_adapters():  # left loaded by an earlier process
            parsed = parse_versioned_name(name)
            if parsed is not None and parsed[0] == prefix:
                self.client.unload_adapter(name)

    def _load_init(self) -> None:
        try:
            self.backend.load_adapter(self.INIT_ADAPTER, self.init_folder)
        except (LLMError, ValueError) as err:
            raise TrainError(f"{self.init_folder}: {str(err).splitlines()[0]}") from None
        self.has_init = True

    def start_from(self, folder: Path) -> None:
        """A new run's hero adapter starts as the adapter folder ``folder``'s weights (its LoRA
        shape must be the config's, :func:`check_adapter_fits`); a copy in ``RUN/init_adapter``
        stays loaded, frozen, as the KL reference."""
        try:
            check_adapter_fits(folder, self.backend.lora)
        except ValueError as err:
            raise TrainError(str(err)) from None
        try:
            self.policy.load(folder)
        except ValueError as err:
            raise TrainError(f"--init-from: {str(err).splitlines()[0]}") from None
        self.policy.save(self.init_folder)
        self._load_init()

    def reference(self) -> BasePolicy:
        # The KL anchor (the loop asks only when train.kl_coef > 0): the adapter the run
        # started from, else the base model itself.
        return BasePolicy(
            self.backend,
            self.INIT_ADAPTER if self.has_init else None,
            at_temperature=self.policy.score_at_temperature,
        )

    def seating(self, names: list[str], hero_power: str, rng: random.Random) -> Seating:
        # The league's draw parsed once; distinct adapters at the table must fit llm.max_loras.
        agents = {name: seat_spec(name) for name in (HERO, *names)}
        seats = fit_seating(
            HERO,
            names,
            max_loras=self.cfg.llm.max_loras,
            uses_slot=lambda name: agents[name].holds_adapter_slot,
            rng=rng,
            hero_seat=POWERS.index(hero_power),
        )
        return {power: agents[name] for power, name in zip(POWERS, seats, strict=True)}

    # ----- playing a group ------------------------------------------------------------------
    def play_group(
        self,
        cfg: DiplomacyConfig,
        registry: LeagueRegistry,
        group_idx: int,
        seating: Seating,
        hero_power: str,
    ) -> list[PlayedGame]:
        """The group's games: at once in this process (one thread each, so their requests
        share batches), or one Ray task each on the shared server."""
        agents = registry.load().agents
        adapter_paths: dict[str, Path] = {}
        for spec in set(seating.values()):
            if spec.kind is not AgentKind.LEAGUE:
                continue
            agent = agents.get(spec.name)
            if agent is None or agent.path is None:
                raise UnknownAgentError(f"league agent {spec.name!r} has no adapter folder")
            adapter_paths[spec.name] = registry.resolve(agent.path)
        tcfg = self.cfg.train
        seeds = [game_seed(self.cfg.run.seed, group_idx, i) for i in range(tcfg.group_size)]
        seating = self.prepare(seating, hero_power, adapter_paths)
        # The tables sample league opponents by their served names; the games are recorded
        # under the league's own names (`seating`).
        served = {
            p: s.served_as(self.served_name(s.name)) if s.name in adapter_paths else s
            for p, s in seating.items()
        }
        if not self.task_map.in_process:  # Ray: each game a task sampling on the shared server
            shared = self.remote_games(tcfg.temperature, served)
            jobs = [
                (cfg.model_dump_json(), group_idx, i, seating, hero_power, seed)
                for i, seed in enumerate(seeds)
            ]
            return self.task_map(play_remote_game, shared, jobs)
        # The last step's backward passes, freed, go back to the system before the games
        # sample: glibc keeps them otherwise, and the first phase's batch stacked on them (RSS
        # went from 3.86 GiB, mostly kept training memory, to 4.85 with the opening batch).
        release_freed_memory()
        shares = split_games(len(seeds), self.play_processes)
        own = shares[0]  # the trainer's share; helpers play the others
        tables = [
            self.policy.table(served, seed=seeds[i], temperature=tcfg.temperature) for i in own
        ]

        def play(k: int) -> RolloutResult:
            table = tables[k]
            return run_rollout(
                cfg, group_idx, own[k], table.seating, hero_power, resolver=table.resolver
            )

        def play_own() -> list[PlayedGame]:
            with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="dip-game") as pool:
                try:
                    results = list(pool.map(play, range(len(tables))))
                except (KeyboardInterrupt, SystemExit):
                    # Ctrl-C or SIGTERM: the sampler refuses the games' next rows, so they end
                    # now rather than when they would have finished (the step is not saved).
                    self.runtime.close()
                    raise
            release_freed_memory()  # the games' KV caches, before the backward passes
            penalty = self.cfg.llm.format_penalty
            return [
                played_game(result, table, seating, hero_power, penalty)
                for table, result in zip(tables, results, strict=True)
            ]

        if self.helpers is None:
            return play_own()
        try:
            return self.helpers.play(
                cfg, group_idx, shares, seeds, seating, served, hero_power, self.slots, play_own
            )
        except PlayWorkerError as err:
            raise TrainError(str(err)) from None

    def prepare(
        self, seating: Seating, hero_power: str, adapter_paths: Mapping[str, str | Path]
    ) -> Seating:
        """Publish the live hero and load the table's adapter opponents; returns the seating,
        reseated with fewer distinct adapters when the sampler cannot hold them all."""
        seating = dict(seating)
        adapter_paths = dict(adapter_paths)
        self.policy.publish()  # the live hero's slot first: opponents take what is left
        while True:
            try:
                self.slots.ensure({self.served_name(n): str(p) for n, p in adapter_paths.items()})
                return seating
            except SlotsExceededError:
                if len(adapter_paths) == 0:
                    raise
                seating, adapter_paths = self._fewer_adapters(seating, hero_power, adapter_paths)

    def _fewer_adapters(
        self, seating: Seating, hero_power: str, paths: dict[str, str | Path]
    ) -> tuple[Seating, dict[str, str | Path]]:
        """The seating with one distinct adapter opponent less (cluster seating)."""
        # fit_seating works on names; each seat keeps the spec its name was parsed into.
        agents = {spec.name: spec for spec in seating.values()}
        hero = seating[hero_power].name
        opponents = [seating[p].name for p in POWERS if p != hero_power]
        slots = 1 + len(paths) - 1  # the hero's version + one adapter opponent fewer
        # A stable seed (str hashes differ between processes): the same fallback every run.
        rng = random.Random(zlib.crc32("|".join([hero_power, *opponents]).encode()))
        seats = fit_seating(
            hero,
            opponents,
            max_loras=max(1, slots),
            uses_slot=lambda name: agents[name].holds_adapter_slot,
            rng=rng,
            hero_seat=POWERS.index(hero_power),
        )
        new = {power: agents[name] for power, name in zip(POWERS, seats, strict=True)}
        kept = {spec.name for spec in new.values()}
        return new, {n: p for n, p in paths.items() if n in kept}

    def served_name(self, league_name: str) -> str:
        """The name a league checkpoint is served under by this run (``{folder}-{run id}-NAME``)."""
        return f"{self.league_prefix}-{league_name}"

    def remote_games(self, temperature: float, served: Seating | None = None) -> RemoteLLMGames:
        """What a remote worker needs to play the hero's games on the server (after
        :meth:`prepare`): the endpoint, the tokenizer's folder, the live hero's served name."""
        llm = self.cfg.llm
        if self.client is None:
            raise LLMError("games on remote workers need llm.backend=openai (a shared server)")
        return RemoteLLMGames(
            endpoint=llm.endpoint,
            served_model_name=self.client.base_model,
            tokenizer_path=str(llm.base_model),
            hero_adapter=self.policy.live_adapter,
            max_new_tokens=llm.max_new_tokens,
            temperature=temperature,
            decoding=self.decoding,
            format_penalty=llm.format_penalty,
            chat=self.runtime.chat,
            adapter_folders=dict(self.slots.folders),
            served_seating=dict(served or {}),
        )

    # ----- weights and files ----------------------------------------------------------------
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

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> Path:
        """Write the hero adapter folder; ``extra`` (step, lineage) goes to its
        ``lineage.json``."""
        folder = self.policy.save(path)
        if extra:
            atomic_write_json(folder / LINEAGE_FILE, extra, mode=adapter_file_mode())
        return folder

    def step_stats(self, games: Sequence[PlayedGame]) -> dict[str, Any]:
        """The hero's order hygiene over the step's games: completions, invalid, missing,
        truncated (cut at ``llm.max_new_tokens``) and grammar-violation (constrained answers
        outside their expression: failed seats, no records) counts, mean completion length in
        tokens; ``llm_grammar_warning`` (also on stderr) when violations pass
        :data:`~leaguezero.diplomacy.llm.client.GRAMMAR_ALARM_SHARE` of the answers; with play
        helpers (``train.play_processes``) their CPU-seconds over the step's games and the
        largest one's RSS (``helper_cpu_seconds``, ``helper_rss_mb``)."""
        stats = [g.stats for g in games if g.stats is not None]
        completions = sum(s.completions for s in stats)
        violations = sum(s.grammar_violations for s in stats)
        out: dict[str, Any] = {
            "llm_completions": completions,
            "llm_parsed": sum(s.parsed for s in stats),
            "llm_invalid": sum(s.invalid for s in stats),
            "llm_missing": sum(s.missing for s in stats),
            "llm_truncated": sum(s.truncated for s in stats),
            "llm_grammar_violations": violations,
            "llm_mean_tokens": round(sum(s.tokens for s in stats) / max(1, completions), 2),
        }
        if (alarm := grammar_alarm(violations, completions)) is not None:
            out["llm_grammar_warning"] = alarm
            print(f"warning: {alarm}", file=sys.stderr, flush=True)
        if self.helpers is not None:  # train.play_processes: what the helpers used
            out.update(self.helpers.take_usage())
        return out

    def close(self) -> None:
        """Stop the helpers and the batcher, or close the server connection."""
        if self.helpers is not None:
            self.helpers.close()
        self.runtime.close()
