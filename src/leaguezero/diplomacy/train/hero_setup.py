"""Which hero a run trains and what it starts from: :func:`make_hero` builds the hero
``train.agent`` names (the small policy network or an LLM's adapter), :func:`init_source`
resolves ``--init-from`` (the source's lineage record, and the config a policy network's
checkpoint shapes)."""

from __future__ import annotations

from pathlib import Path

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.train.heroes import Hero, TaskMap, TrainError, local_map
from leaguezero.diplomacy.train.lineage import LineageError, resolve_init_from


def make_hero(cfg: DiplomacyConfig, ckpt_dir: Path, task_map: TaskMap = local_map) -> Hero:
    """The hero ``cfg.train.agent`` names. An LLM hero takes a task map other than
    :data:`local_map` only with ``llm.backend: openai`` (raises :class:`TrainError`)."""
    if cfg.train.hero.llm:
        from leaguezero.diplomacy.train.llm_hero import LanguageModelHero

        return LanguageModelHero(cfg, ckpt_dir.parent, task_map)
    from leaguezero.diplomacy.train.network_hero import NetworkHero

    return NetworkHero(cfg, ckpt_dir, task_map)


def init_source(cfg: DiplomacyConfig, init_from: str | Path | None, resume: bool):
    """``--init-from``'s source (None without one) and the config the run uses (a policy
    network's shape comes from the checkpoint); raises :class:`TrainError` in one line."""
    if init_from is None:
        return None, cfg
    if resume:
        raise TrainError("--init-from starts a new run; a resumed run keeps its weights")
    try:
        source = resolve_init_from(str(init_from), cfg.train.hero)
    except LineageError as err:
        raise TrainError(str(err)) from None
    if not cfg.train.hero.llm:
        from leaguezero.diplomacy.train.network_hero import init_config

        cfg = init_config(cfg, source.path)  # the network's shape is the run's
    return source, cfg
