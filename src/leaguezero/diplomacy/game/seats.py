"""Who plays a power: the policy interface and how a seat's agent becomes a policy.

A seat holds an :class:`~leaguezero.diplomacy.game.catalogue.AgentSpec`, its agent's name
parsed once by the catalogue (a bot, the base model, the hero, a checkpoint or folder). Bots
are built here and never touch a model; every other spec goes through an :data:`AgentResolver`
the caller supplies (the LLM and learned-policy providers arrive with the training code), so
this module knows no model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from leaguezero.diplomacy.game.catalogue import AgentSpec, seat_spec
from leaguezero.league.types import BASE_MODEL  # the seat value None (no adapter)

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.env import DiplomacyEnv

__all__ = [
    "BASE_MODEL",
    "AgentResolver",
    "Policy",
    "ReportsAnswers",
    "UnknownAgentError",
    "resolve_agent",
]


@runtime_checkable
class Policy(Protocol):
    """Anything that gives orders for one power in the current phase.

    ``env.game`` is the engine's ``Game``; ``env.legal_orders(power)`` the legal orders per
    orderable location (computed once per phase for all seats). Returned orders that are not
    legal are dropped and counted by the rollout, and their units hold.
    """

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]: ...


@runtime_checkable
class ReportsAnswers(Protocol):
    """A policy that writes its answers (an LLM seat) and counts its own faults before the
    rollout sees the orders: a tolerant parser turns garbage into fewer orders, so the
    engine-side counts alone would read 0 for a model that wrote nothing legal."""

    def answer_stats(self, env: DiplomacyEnv, power: str) -> dict[str, int] | None:
        """``power``'s answers in ``env``'s game so far: ``answers`` (completions),
        ``invalid`` (order lines that were not legal), ``missing`` (owed orders not given),
        ``truncated`` (answers cut at the token budget), ``grammar_violations`` (constrained
        answers outside their expression: the seat held); None if it played none."""


# A seat's agent (parsed: its kind and name) -> a policy for one seat of one game. Called once
# per non-bot seat of a rollout, so clones of one agent get separate policies (own seeds,
# records). A resolver reads the spec it is handed and parses no name again.
AgentResolver = Callable[[AgentSpec], Policy]


class UnknownAgentError(LookupError):
    """An agent name that is neither a bot nor resolvable by the caller's resolver."""


def resolve_agent(
    agent: AgentSpec | str | None,
    seed: int,
    resolver: AgentResolver | None = None,
) -> Policy:
    """The policy for ``agent``: a fresh seeded bot, or whatever ``resolver`` returns for it.

    ``agent``: a seat's spec, or a league-table name (a script's bot, ``None`` for the base
    model), read here by :func:`~leaguezero.diplomacy.game.catalogue.seat_spec`. Raises
    :class:`UnknownAgentError` with the names that would work when the agent is not a bot and
    there is no resolver, or the resolver cannot provide it (it may raise ``KeyError`` or
    :class:`UnknownAgentError`, or return None).
    """
    from leaguezero.diplomacy.game.bots import BOTS, make_bot

    spec = agent if isinstance(agent, AgentSpec) else seat_spec(agent)
    if spec.is_bot:
        return make_bot(spec.name, seed)
    bots = ", ".join(BOTS)
    if resolver is None:
        raise UnknownAgentError(
            f"agent {spec.name!r} is not a bot ({bots}) and no agent resolver was "
            "given to load models or adapters"
        )
    try:
        policy = resolver(spec)
    except (KeyError, UnknownAgentError) as err:
        raise UnknownAgentError(
            f"agent {spec.name!r} could not be resolved ({err}); bots are {bots}"
        ) from None
    if policy is None:
        raise UnknownAgentError(
            f"agent {spec.name!r} could not be resolved (the resolver returned None); "
            f"bots are {bots}"
        )
    return policy
