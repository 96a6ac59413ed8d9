"""Option types and helpers shared by the ``leaguezero diplomacy`` command modules (imported by
each of them, so none has to import ``app.py`` and risk a circular import)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: built-in defaults)."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key: --set max_years=5 (repeatable)."),
]
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        min=1,
        help="torch threads of this process (default run.threads = 1: on a shared 2-core "
        "machine two threads cost 12x the CPU of one for an LLM's generation).",
    ),
]
ResultsOpt = Annotated[
    Path | None,
    typer.Option(
        "--results",
        help="Append each finished game to this NDJSON file as it ends, so a run cut short "
        "keeps its games.",
    ),
]


def use_threads(cfg, threads: int | None):
    """The config with ``--threads`` applied (``run.threads``), and torch set to it: every
    Diplomacy command runs one torch thread unless told otherwise, as ``yz`` does."""
    import torch

    if threads is not None:
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"threads": threads})})
    torch.set_num_threads(cfg.run.threads)
    return cfg


def load_diplomacy_config(config: Path | None, overrides: list[str] | None):
    """The library's :func:`~leaguezero.diplomacy.game.catalogue.load_diplomacy_config` (the
    file, the overrides, ``llm.base_model: pretrained-llm`` / ``smollm2`` resolved to their
    files), a problem turned into a one-line CLI error."""
    from leaguezero.common.config import ConfigError
    from leaguezero.diplomacy.game import catalogue

    try:
        return catalogue.load_diplomacy_config(config, overrides or [])
    except (ConfigError, catalogue.AgentSpecError) as err:
        raise fail(str(err)) from None


def command_agents(names: list[str], cfg, *, sample: bool, rank: bool = False):
    """The command's agents parsed by the catalogue: ``(specs, resolver, cfg)``, ``specs`` one
    per name (the seats the command plays: nothing parses a name again), the resolver None
    when all are bots, ``cfg`` with the ``llm`` settings a shipped adapter pins for the keys the
    user did not set (``pretrained-smol``'s system prompt, ...), so the report shows what played.

    Bad names fail in one line listing what is accepted, a damaged checkpoint before any game
    starts, an LLM folder that cannot be loaded in one line."""
    try:
        from leaguezero.diplomacy.agents.policy import CheckpointError
        from leaguezero.diplomacy.agents.resolvers import command_resolver, load_policy_files
        from leaguezero.diplomacy.game.catalogue import AgentSpecError, parse_agents
    except ImportError as err:  # the optional engine is missing
        raise fail(str(err)) from None

    try:
        specs = parse_agents(names)
    except AgentSpecError as err:
        raise fail(str(err)) from None
    try:
        policies = load_policy_files(specs)  # a damaged file fails here, before any game
    except CheckpointError as err:
        raise fail(f"{err}; pass another checkpoint or a bot") from None
    decoding = None
    if rank:
        from leaguezero.diplomacy.llm.orders.decoding import RANK

        decoding = RANK
    try:
        if any(spec.llm_settings for spec in specs):
            from leaguezero.diplomacy.llm.resolvers import pinned_llm

            cfg = cfg.model_copy(update={"llm": pinned_llm(specs, cfg.llm)})
        resolver = command_resolver(
            specs, cfg, greedy=not sample, decoding=decoding, policies=policies
        )
    except Exception as err:  # LLMError, a bad folder: one line
        raise fail(f"cannot load the LLM agents: {err}") from None
    return specs, resolver, cfg
