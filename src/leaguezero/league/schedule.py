"""The geometric checkpoint schedule (docs/reference/design.md#checkpoint-schedule).

Three kinds of snapshots enter the league:

1. recent curriculum — every ``recent_every`` (10) steps within the last ``recent_window`` (100)
   steps, so the hero keeps meeting slightly weaker versions of itself;
2. historical anchors — every ``anchor_every`` (100) steps, forever, against cycling;
3. the elite — any snapshot whose rating beats the best checkpoint so far.

:func:`should_add_to_league` is the design's function, check for check. The design's recent rule
(``step > latest_step - 100``) admits every 10th step as training moves forward; the "last 100
steps" part is realised by :func:`retire_candidates`, which names curriculum snapshots that
have fallen out of the window (never anchors, elites, the first or the best checkpoint), so a
caller can retire them from sampling while their ratings and match history stay on record.
"""

from __future__ import annotations

from typing import Protocol

from leaguezero.common.events import EventWriter
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.tracking import emit_checkpoint_added
from leaguezero.league.types import AgentInfo

RECENT_EVERY = 10
RECENT_WINDOW = 100
ANCHOR_EVERY = 100

FIRST = "first"
RECENT = "recent"
ANCHOR = "anchor"
ELITE = "elite"


class RegistryView(Protocol):
    """What the schedule needs from a registry (``LeagueRegistry`` or ``LeagueState``)."""

    @property
    def checkpoints(self) -> list[AgentInfo]: ...

    @property
    def latest_step(self) -> int: ...

    @property
    def best_elo(self) -> float: ...


def should_add_to_league(step: int, current_elo: float, registry: RegistryView) -> bool:
    """Whether the snapshot at ``step`` with rating ``current_elo`` joins the league
    (docs/reference/design.md#checkpoint-schedule).

    True for the first checkpoint; for a multiple of 10 after ``latest_step - 100``; for a
    multiple of 100; and for a rating above the best checkpoint's. Otherwise False.
    """
    # Always add first checkpoint
    if len(registry.checkpoints) == 0:
        return True
    # Recent curriculum: every 10 steps for last 100
    if step % RECENT_EVERY == 0 and step > registry.latest_step - RECENT_WINDOW:
        return True
    # Historical anchors: every 100 steps
    if step % ANCHOR_EVERY == 0:
        return True
    # Elite: new high score
    return current_elo > registry.best_elo


def promotion_reasons(
    step: int, current_elo: float, registry: RegistryView, elite_margin: float = 0.0
) -> list[str]:
    """Every rule of the schedule that admits this snapshot (empty: do not add).

    Non-empty exactly when :func:`should_add_to_league` is True (with ``elite_margin`` 0; a
    positive margin asks the elite to beat the best checkpoint by more than that). Store the
    reasons with the checkpoint (``AgentInfo.extra["reasons"]``) so that
    :func:`retire_candidates` knows which snapshots are anchors or elites.

    ``current_elo`` must be the live hero's own rating (from games it played, see
    :class:`~leaguezero.league.session.LeagueSession`): a rating inherited from the newest
    checkpoint can never exceed the best one, so the elite rule would never fire.
    """
    reasons = [FIRST] if len(registry.checkpoints) == 0 else []
    if step % RECENT_EVERY == 0 and step > registry.latest_step - RECENT_WINDOW:
        reasons.append(RECENT)
    if step % ANCHOR_EVERY == 0:
        reasons.append(ANCHOR)
    if current_elo > registry.best_elo + elite_margin:
        reasons.append(ELITE)
    return reasons


def retire_candidates(
    checkpoints: list[AgentInfo],
    current_step: int,
    best_agent: str | None = None,
) -> list[str]:
    """Names of curriculum snapshots older than the recent window that may stop being sampled.

    A checkpoint is kept when its step is a multiple of 100 (anchor), when it was admitted as
    the first or an elite (per ``extra["reasons"]``), when it is ``best_agent``, or when its step
    is within ``RECENT_WINDOW`` of ``current_step``.
    """
    out = []
    for agent in checkpoints:
        reasons = set(agent.extra.get("reasons", ()))
        step = agent.step if agent.step is not None else 0
        if step % ANCHOR_EVERY == 0 or reasons & {FIRST, ELITE} or agent.name == best_agent:
            continue
        if step > current_step - RECENT_WINDOW:
            continue
        out.append(agent.name)
    return out


def promote_if_scheduled(
    registry: LeagueRegistry,
    *,
    name: str,
    path: str | None,
    step: int,
    current_elo: float,
    parent: str | None = None,
    events: EventWriter | None = None,
    elo: float | None = None,
    elite_margin: float = 0.0,
) -> AgentInfo | None:
    """The checkpointer: add the snapshot to the league when the schedule says so.

    Decides and adds under one registry lock (two trainers cannot both add a "first"
    checkpoint), stores the promotion reasons in ``extra["reasons"]``, and emits
    ``league.checkpoint_added``. The new entry's rating starts at ``elo`` (the session passes
    the live hero's own rating), else at its parent's (see
    :meth:`~leaguezero.league.registry.LeagueState.add_checkpoint`). Returns the new agent, or None
    when not scheduled.
    """
    with registry.update() as state:
        reasons = promotion_reasons(step, current_elo, state, elite_margin)
        if not reasons:
            return None
        agent = state.add_checkpoint(
            name, path=path, step=step, elo=elo, parent=parent, extra={"reasons": reasons}
        )
    emit_checkpoint_added(events, agent, reasons)
    return agent
