"""Agents of the catalogue (:mod:`~leaguezero.diplomacy.game.catalogue`) as the rollout's resolver:
the one place specs become policies.

- :func:`policy_resolver`: policy checkpoint files by name (league entries, command-line
  ``*.pt`` files), a fresh seeded actor per seat;
- :func:`command_resolver`: the agents of a command (``leaguezero diplomacy eval/bench/play``,
  the web page): policy files and LLM folders
  (:func:`~leaguezero.diplomacy.llm.resolvers.folder_resolver`);
- :func:`league_resolver_factory`: the league evaluator's agents, per the run's hero kind
  (policy checkpoints, or adapter folders on the run's base model).

Bots never reach a resolver (the rollout builds them by name,
:func:`~leaguezero.diplomacy.game.seats.resolve_agent`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec
from leaguezero.diplomacy.game.seats import AgentResolver, UnknownAgentError

# make(paths, *, seed, greedy, temperature) -> a resolver of the league names in ``paths``.
LeagueResolverFactory = Callable[..., AgentResolver]


def policy_resolver(
    paths: Mapping[str, str | Path],
    *,
    seed: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    loaded: Mapping[str, Any] | None = None,
) -> AgentResolver:
    """A resolver that plays each named policy checkpoint with a fresh, seeded actor per seat.

    Each checkpoint is loaded once (``loaded``: policies already loaded, by name); every call
    (one per seat) gets its own actor with the next seed, so clones of one agent do not share a
    random stream. Raises ``UnknownAgentError`` for a seat whose name is not in ``paths``.
    """
    from leaguezero.diplomacy.agents.policy import load_policy

    policies: dict[str, Any] = dict(loaded or {})
    counter = itertools.count()

    def resolve(spec: AgentSpec) -> Any:
        key = spec.name
        if key not in paths:
            raise UnknownAgentError(f"no checkpoint for agent {key!r}")
        if key not in policies:
            policies[key] = load_policy(paths[key])
        if (
            spec.search is not None
        ):  # search:AGENT?..: the averaged strategy is sampled, greedy or not
            from leaguezero.diplomacy.agents.search import SearchAgent, SearchSettings

            settings = SearchSettings.from_pairs(spec.search)
            return SearchAgent(policies[key], settings, seed=seed * 1_000_003 + next(counter))
        return policies[key].actor(
            seed=seed * 1_000_003 + next(counter), temperature=temperature, greedy=greedy
        )

    return resolve


def load_policy_files(specs: Sequence[AgentSpec]) -> dict[str, Any]:
    """The policy checkpoint files among ``specs``, loaded (a damaged file raises
    :class:`~leaguezero.diplomacy.agents.checkpoint.CheckpointError` here, before any game, as
    does a ``search:`` agent whose policy has no value head)."""
    from leaguezero.diplomacy.agents.policy import CheckpointError, load_policy

    loaded = {
        s.name: load_policy(s.path)
        for s in specs
        if s.kind is AgentKind.POLICY_FILE and s.path is not None
    }
    for s in specs:
        if s.search is not None and loaded[s.name].net.value_head is None:
            raise CheckpointError(
                f"{s.name}: {s.path} has no value head, which search values positions with; "
                "use a checkpoint made with pretrain-policy --value-coef > 0"
            )
    return loaded


def command_resolver(
    specs: Sequence[AgentSpec],
    cfg,
    *,
    greedy: bool,
    decoding=None,
    policies: Mapping[str, Any] | None = None,
) -> AgentResolver | None:
    """The resolver of a command's agents (None when all are bots): policy files
    (``policies``: already loaded by :func:`load_policy_files`) and LLM folders, seeded from
    ``cfg.run.seed``; ``decoding``: the LLM folders' decoding strategy (None: ``cfg.llm.mode``)."""
    by_name = {s.name: s for s in specs}
    files = {s.name: s.path for s in by_name.values() if s.kind is AgentKind.POLICY_FILE}
    folders = [s for s in by_name.values() if s.is_llm_folder]
    llm = None
    if folders:
        from leaguezero.diplomacy.llm.resolvers import folder_resolver

        llm = folder_resolver(folders, cfg.llm, seed=cfg.run.seed, greedy=greedy, decoding=decoding)
    if not files:
        return llm
    played = policy_resolver(files, seed=cfg.run.seed, greedy=greedy, loaded=policies)
    if llm is None:
        return played

    def resolve(spec: AgentSpec):
        return llm(spec) if spec.is_llm_folder else played(spec)

    return resolve


def league_resolver_factory(cfg) -> tuple[LeagueResolverFactory, Callable[[], None]]:
    """For the league evaluator's process: ``(make(paths, *, seed, greedy, temperature),
    close)``. League entries are policy checkpoint files, or in an LLM run adapter folders on
    the run's base model (:func:`~leaguezero.diplomacy.llm.resolvers.evaluation_resolver_factory`:
    on this process's base model, or on the run's server)."""
    if cfg.train.hero.llm:
        from leaguezero.diplomacy.llm.resolvers import evaluation_resolver_factory

        return evaluation_resolver_factory(cfg.llm)
    return policy_resolver, lambda: None
