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
    """Load a YatzyConfig, turning a validation problem into a one-line CLI error."""
    from leaguezero.common.config import ConfigError, load_config
    from leaguezero.yatzy.config import YatzyConfig

    try:
        return load_config(YatzyConfig, config, overrides or [])
    except ConfigError as err:
        raise fail(str(err)) from None


def load_oracle_with_notice(table: Path | None):
    """Load the oracle; a first table build (~20 s) is announced on stderr in one dim line."""
    from leaguezero.yatzy.oracle.solver import load_oracle

    return load_oracle(table, progress=lambda msg: typer.secho(msg, err=True, dim=True))


def search_settings(cfg, sims: int | None = None):
    """The command's search: the config's :class:`SearchSettings` in evaluation mode with
    ``sims`` simulations (None: the ``mcts`` budgets). Every ``yz`` command builds it here."""
    from leaguezero.yatzy.search.settings import SearchSettings

    return SearchSettings.from_config(cfg).evaluation(sims)
