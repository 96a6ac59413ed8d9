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


def load_diplomacy_config(config: Path | None, overrides: list[str] | None):
    """Load a DiplomacyConfig, turning a validation problem into a one-line CLI error."""
    from leaguezero.common.config import ConfigError, load_config
    from leaguezero.diplomacy.config import DiplomacyConfig

    try:
        return load_config(DiplomacyConfig, config, overrides or [])
    except ConfigError as err:
        raise fail(str(err)) from None
