"""``/api/yatzy``: start a game against an agent, move, let the agent move, ask for a hint.

Everything that runs an agent, the oracle or a checkpoint load goes through the app's bounded
pool (``request.app.state.pool``), so the event loop only routes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from leaguezero.web.limits import MAX_SIMS
from leaguezero.web.sessions import client_of, session_of
from leaguezero.web.yatzy_games import (
    AGENT_CHOICES,
    YatzyWebGame,
    agent_hints,
    new_game,
    resolve_run_spec,
    run_opponents,
)

router = APIRouter(prefix="/api/yatzy")


class NewGame(BaseModel):
    agent: Annotated[str, Field(min_length=1, max_length=300)] = "greedy"
    seat: Annotated[int, Field(ge=0, le=1)] = 0
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0
    judge: bool = True
    sims: Annotated[int, Field(ge=1, le=MAX_SIMS)] = 64


class Move(BaseModel):
    keep: Annotated[list[int] | None, Field(max_length=5)] = None
    mark: int | Annotated[str, Field(max_length=40)] | None = None


def _game(request: Request, game_id: str) -> YatzyWebGame:
    game = request.app.state.games.get(session_of(request), game_id)
    if not isinstance(game, YatzyWebGame):
        raise ValueError("that game is not a Yatzy game")
    return game


def _locked(game: YatzyWebGame, fn, *args, **kwargs):
    with game.lock:
        return fn(*args, **kwargs)


@router.get("/agents")
def agents(request: Request) -> dict:
    """The agents by name, and the ``--run`` folders' best networks (``run:N``, named)."""
    runs = run_opponents(request.app.state.settings.runs)
    return {"agents": list(AGENT_CHOICES), "runs": runs, "hints": agent_hints()}


@router.post("/games")
async def start(body: NewGame, request: Request) -> dict:
    settings, pool = request.app.state.settings, request.app.state.pool
    request.app.state.games.check_room(session_of(request), client_of(request))  # before the work
    spec, name = resolve_run_spec(body.agent, settings.runs)  # run:N by index, never a path
    game = await pool.run(
        new_game, spec, body.seed, body.seat, body.judge, body.sims, settings.oracle_table, name
    )
    game_id = request.app.state.games.add(session_of(request), game, client_of(request))
    return {"id": game_id, **game.view()}


@router.get("/games/{game_id}")
def show(game_id: str, request: Request) -> dict:
    game = _game(request, game_id)
    with game.lock:
        return {"id": game_id, **game.view()}


@router.post("/games/{game_id}/move")
async def move(game_id: str, body: Move, request: Request) -> dict:
    game = _game(request, game_id)

    def play() -> dict:
        verdict = game.play(keep=body.keep, mark=body.mark)
        return {"id": game_id, "verdict": verdict, **game.view()}

    return await request.app.state.pool.run(_locked, game, play)


@router.post("/games/{game_id}/agent-step")
async def agent_step(game_id: str, request: Request) -> dict:
    game = _game(request, game_id)

    def step() -> dict:
        did = game.agent_step()
        return {"id": game_id, "did": did, **game.view()}

    return await request.app.state.pool.run(_locked, game, step)


@router.get("/games/{game_id}/hint")
async def hint(game_id: str, request: Request) -> dict:
    game = _game(request, game_id)
    return {"hint": await request.app.state.pool.run(_locked, game, game.hint)}
