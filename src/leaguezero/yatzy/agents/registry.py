"""The Yatzy agent catalogue: a name is parsed once into an :class:`AgentSpec` and built here.

Accepted names (:data:`ACCEPTED`): the bots ``random``, ``greedy`` and ``oracle``;
``pretrained`` (the network shipped with the package, two turns deep unless
``pretrained?depth=1``); ``model:PATH[?key=value&...]`` and, where a command asks for a
checkpoint, a bare ``PATH`` to a ``.pt`` file. Every command, the league
(:mod:`leaguezero.yatzy.train.league.agents`) and the evaluator build their agents through
:func:`build_agent`, so the agents themselves (and :mod:`leaguezero.yatzy.agents.match`) need
not import each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from leaguezero.yatzy.agents.base import Agent, GreedyAgent, RandomAgent
from leaguezero.yatzy.search.settings import SearchSettings

BOT_NAMES = ("random", "greedy", "oracle")
PRETRAINED = "pretrained"  # the shipped network (PRETRAINED_PATH)
MODEL_PREFIX = "model:"  # model:PATH[?key=value&...], a checkpoint file
BUILTIN_AGENTS = (*BOT_NAMES, PRETRAINED)
ACCEPTED = f"{', '.join(BOT_NAMES)}, {PRETRAINED}[?depth=1], model:PATH[?key=value&...]"
# The strongest network trained here, shipped with the package (docs/guides/alphazero.md says how it
# was made); ``pretrained`` plays it with the search its checkpoint is for.
# ``pretrained`` searches two turns deep by default: over 20,000 paired games (seeds 51265743+k)
# the shipped network beat itself at depth 1 by 0.5038 ± 0.0019 (+0.40 ± 0.16 points a game),
# and the exact oracle by 0.5070 ± 0.0022 (depth 1: 0.5007 ± 0.0031), at most 0.04 s of CPU a
# decision on one core; ``pretrained?depth=1`` is the network's own strength.
PRETRAINED_DEFAULT_QUERY = "depth=2"
PRETRAINED_PATH = Path(__file__).resolve().parents[1] / "pretrained" / "yatzy_turn.pt"


class AgentSpecError(ValueError):
    """An agent name that cannot be built; the message lists what is accepted."""


@dataclass(frozen=True)
class AgentSpec:
    """A parsed agent name: a bot (``path`` None) or a checkpoint with its search options.

    ``name`` is the bot's name or the text given; ``query`` the ``key=value&...`` options of a
    checkpoint (empty: the settings given at build time)."""

    name: str
    path: Path | None = None
    query: str = ""

    @property
    def is_checkpoint(self) -> bool:
        return self.path is not None


def parse_agent_spec(text: str, *, bare_path: bool = False) -> AgentSpec:
    """Parse an agent name (see the module docstring); ``bare_path`` also accepts a plain path
    to a checkpoint file. Raises :class:`AgentSpecError` listing :data:`ACCEPTED`."""
    if text in BOT_NAMES:
        return AgentSpec(text)
    head, _, query = text.partition("?")
    if head == PRETRAINED:
        if not PRETRAINED_PATH.is_file():
            raise AgentSpecError(
                f"this installation has no pretrained network ({PRETRAINED_PATH} is missing)"
            )
        if "depth" not in dict(parse_qsl(query)):  # two turns deep unless asked otherwise
            query = "&".join(q for q in (PRETRAINED_DEFAULT_QUERY, query) if q)
        return AgentSpec(text, PRETRAINED_PATH, query)
    looks_like_path = head.endswith(".pt") or os.sep in head or Path(head).is_file()
    if head.startswith(MODEL_PREFIX) or (bare_path and head and looks_like_path):
        path = Path(head.removeprefix(MODEL_PREFIX))
        if not path.is_file():
            raise AgentSpecError(
                f"checkpoint file {path} does not exist; give a .pt file or one of {ACCEPTED}"
            )
        return AgentSpec(text, path, query)
    raise AgentSpecError(f"unknown agent {text!r}: use one of {ACCEPTED}")


def checkpoint_name(text: str) -> str | None:
    """``text`` as ``model:PATH[?query]`` when its spelling alone names a checkpoint
    (``model:PATH`` or a ``.pt`` path, options kept), else None (a bot, ``pretrained``, ...).

    No file is looked at: a caller that must not tell which files exist (the web app) decides
    from the name, then builds the agent."""
    head = text.partition("?")[0]
    if head.startswith(MODEL_PREFIX):
        return text
    if head.endswith(".pt"):
        return MODEL_PREFIX + text
    return None


def build_agent(
    spec: AgentSpec,
    *,
    seed: int = 0,
    settings: SearchSettings | None = None,
    oracle=None,
    oracle_table: str | os.PathLike | None = None,
    name: str | None = None,
    **options: object,
) -> Agent:
    """The agent of ``spec``. Checkpoints search with ``settings`` (default: the config
    defaults) overridden by the spec's query and ``options``, named ``name`` (default
    ``model:PATH``); ``oracle`` reuses a loaded oracle,
    else ``oracle_table`` (or the cached table) is loaded."""
    if spec.path is not None:
        from leaguezero.yatzy.agents.model import ModelAgent

        text = f"{spec.path}?{spec.query}" if spec.query else str(spec.path)
        return ModelAgent.from_spec(text, seed=seed, settings=settings, name=name, **options)
    if spec.name == "random":
        return RandomAgent(seed=seed)
    if spec.name == "greedy":
        return GreedyAgent()
    from leaguezero.yatzy.agents.oracle import OracleAgent

    return OracleAgent(table_path=oracle_table or options.get("table_path"), oracle=oracle)


def make_agent(
    spec: str, seed: int = 0, settings: SearchSettings | None = None, **options: object
) -> Agent:
    """Build an agent from its name (:func:`parse_agent_spec`, then :func:`build_agent`)."""
    return build_agent(parse_agent_spec(spec), seed=seed, settings=settings, **options)
