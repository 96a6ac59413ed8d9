"""Option types and helpers shared by the ``yz`` command modules (imported by all of them, so
none of them has to import ``app.py`` and risk a circular import)."""

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
    typer.Option("--set", help="Override a config key: --set mcts.c_puct=2.0 (repeatable)."),
]


def load_yatzy_config(config: Path | None, overrides: list[str] | None):
    """The library's :func:`~leaguezero.yatzy.config.load_yatzy_config`, a validation problem
    turned into a one-line CLI error."""
    from leaguezero.common.config import ConfigError
    from leaguezero.yatzy import config as yatzy_config

    try:
        return yatzy_config.load_yatzy_config(config, overrides or [])
    except ConfigError as err:
        raise fail(str(err)) from None


def setup_threads(cfg) -> None:
    """Torch threads per process (``run.threads``)."""
    # Processes share the cores: two torch threads under load ran 30-70x slower than one.
    import torch

    torch.set_num_threads(cfg.run.threads)


def load_oracle_with_notice(table: Path | None):
    """Load the oracle; a first table build (~20 s) is announced on stderr in one dim line."""
    from leaguezero.yatzy.oracle.solver import load_oracle

    return load_oracle(table, progress=lambda msg: typer.secho(msg, err=True, dim=True))


def search_settings(cfg, sims: int | None = None):
    """The command's search (:func:`~leaguezero.yatzy.search.settings.evaluation_settings`):
    the config's settings in evaluation mode with ``sims`` simulations (None: the ``mcts``
    budgets)."""
    from leaguezero.yatzy.search.settings import evaluation_settings

    return evaluation_settings(cfg, sims)


# The agent names every command accepts (the catalogue: leaguezero.yatzy.agents.registry).
AGENT_NAMES = "random | greedy | oracle | pretrained (2 turns) | pretrained?depth=1 | model:PATH"
CHECKPOINT_NAMES = "a .pt file, model:PATH, pretrained or pretrained?depth=1"


def build_cli_agent(text: str, settings, *, seed: int = 0, checkpoint: bool = False, **kw):
    """The agent a command names with ``text`` (a bare path counts as a checkpoint), searching
    with ``settings``; ``checkpoint`` insists on a network. A bad name exits with one line that
    lists what is accepted."""
    from leaguezero.yatzy.agents.registry import AgentSpecError, build_agent, parse_agent_spec

    try:
        spec = parse_agent_spec(text, bare_path=True)
        if checkpoint and not spec.is_checkpoint:
            raise AgentSpecError(f"{text!r} is a bot, not a checkpoint: give {CHECKPOINT_NAMES}")
        return build_agent(spec, seed=seed, settings=settings, **kw)
    except (AgentSpecError, FileNotFoundError, ValueError) as err:
        raise fail(str(err)) from None


def se_text(se: float, digits: int) -> str:
    """A standard error for a person: ``too few games`` where it is NaN or rounds to 0 (a win
    rate of 0 or 1 over a few games has no spread, not a certain value)."""
    if se != se or round(se, digits) == 0:
        return "? (too few games)"
    return f"{se:.{digits}f}"
