"""Building an agent from its name (``random``, ``greedy``, ``oracle``, ``pretrained``,
``model:PATH``): the one place that knows every kind of agent, so that the agents themselves
(and :mod:`leaguezero.yatzy.agents.match`) need not import each other.
"""

from __future__ import annotations

from pathlib import Path

from leaguezero.yatzy.agents.base import Agent, GreedyAgent, RandomAgent
from leaguezero.yatzy.search.settings import SearchSettings

BUILTIN_AGENTS = ("random", "greedy", "oracle", "pretrained")
# The strongest network trained here, shipped with the package (docs/alphazero.md says how it
# was made); ``pretrained`` plays it with the search its checkpoint is for.
PRETRAINED_PATH = Path(__file__).resolve().parents[1] / "pretrained" / "yatzy_turn.pt"


class AgentSpecError(ValueError):
    """An agent name that cannot be built; the message lists what is allowed."""


def make_agent(
    spec: str, seed: int = 0, settings: SearchSettings | None = None, **options: object
) -> Agent:
    """Build an agent from its name: ``random``, ``greedy``, ``oracle``, ``pretrained`` (the
    network shipped with the package; ``pretrained?search=...`` takes model options too) or
    ``model:PATH``.

    Model agents search with ``settings`` (default: the config defaults) overridden by
    ``options``; bots ignore both.
    """
    if spec == "random":
        return RandomAgent(seed=seed)
    if spec == "greedy":
        return GreedyAgent()
    if spec == "oracle":
        from leaguezero.yatzy.agents.oracle import OracleAgent

        return OracleAgent(**{k: v for k, v in options.items() if k == "table_path"})
    if spec == "pretrained" or spec.startswith("pretrained?"):
        if not PRETRAINED_PATH.is_file():
            raise AgentSpecError(
                f"this installation has no pretrained network ({PRETRAINED_PATH} is missing)"
            )
        spec = f"model:{PRETRAINED_PATH}{spec[len('pretrained') :]}"
    if spec.startswith("model:"):
        from leaguezero.yatzy.agents.model import ModelAgent

        return ModelAgent.from_spec(spec[len("model:") :], seed=seed, settings=settings, **options)
    raise AgentSpecError(
        f"unknown agent {spec!r}: use one of {', '.join(BUILTIN_AGENTS)} or model:PATH"
    )
