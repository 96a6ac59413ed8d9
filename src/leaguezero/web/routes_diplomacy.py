"""``/api/diplomacy``: start a game to watch or play, step it, browse its phases, replay an
uploaded saved game.

Agents, the engine and the map renderer run in the app's bounded pool
(``request.app.state.pool``). An upload is read first in a child process
(:func:`~leaguezero.web.workers.run_in_child`: parsed, every list bounded, loaded by the engine
within :data:`~leaguezero.web.limits.UPLOAD_CPU_S` of CPU time, one upload at a time), and only a
document the child read is loaded here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from leaguezero.web.diplomacy_games import (
    MAX_YEARS,
    DiplomacyWebGame,
    agent_choices,
    load_replay,
    new_game,
    read_upload,
)
from leaguezero.web.limits import MAX_UPLOADS_AT_ONCE, UPLOAD_CPU_S, UPLOAD_TIMEOUT_S
from leaguezero.web.sessions import client_of, session_of
from leaguezero.web.workers import Busy, TookTooLong, run_in_child

router = APIRouter(prefix="/api/diplomacy")


class NewGame(BaseModel):
    agents: Annotated[dict[str, Annotated[str, Field(max_length=300)]], Field(max_length=7)]
    human: Annotated[str, Field(max_length=20)] | None = None
    max_years: Annotated[int, Field(ge=1, le=MAX_YEARS)] = 2
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0


class Step(BaseModel):
    orders: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=40)] = []


def _game(request: Request, game_id: str) -> DiplomacyWebGame:
    game = request.app.state.games.get(session_of(request), game_id)
    if not isinstance(game, DiplomacyWebGame):
        raise ValueError("that game is not a Diplomacy game")
    return game


@router.get("/agents")
def agents() -> dict:
    return agent_choices()


@router.post("/games")
async def start(body: NewGame, request: Request) -> dict:
    human = body.human.upper() if body.human else None
    agents = {power.upper(): name for power, name in body.agents.items()}
    request.app.state.games.check_room(session_of(request), client_of(request))  # before the work
    game = await request.app.state.pool.run(new_game, agents, human, body.max_years, body.seed)
    game_id = request.app.state.games.add(session_of(request), game, client_of(request))
    return {"id": game_id, **await request.app.state.pool.run(game.locked_view)}


def _read_and_load(body: bytes) -> DiplomacyWebGame:
    """The upload read in a child (killed past its CPU time), then the document it proved
    readable loaded here."""
    saved = run_in_child(read_upload, body, cpu_s=UPLOAD_CPU_S, wall_s=UPLOAD_TIMEOUT_S)
    game = load_replay(saved)
    game.locked_view(0)
    return game


@router.post("/replays")
async def replay(request: Request) -> dict:
    state = request.app.state
    # Read in full before any answer (bounded by the guard, limits.MAX_UPLOAD_BYTES): a refusal
    # sent while the body still arrives is lost to the client in a reset.
    body = await request.body()
    if getattr(state, "uploads", 0) >= MAX_UPLOADS_AT_ONCE:
        raise Busy("busy: another saved game is being read; try again in a moment")
    state.games.check_room(session_of(request), client_of(request))  # before the child's work
    state.uploads = getattr(state, "uploads", 0) + 1  # the event loop's thread only: no lock
    try:
        game = await state.pool.run(_read_and_load, body)
    except TookTooLong:
        raise ValueError(f"the saved game took over {UPLOAD_CPU_S:g} s to read") from None
    finally:
        state.uploads -= 1
    game_id = state.games.add(session_of(request), game, client_of(request))
    return {"id": game_id, **await state.pool.run(game.locked_view, 0)}


@router.get("/games/{game_id}")
async def show(game_id: str, request: Request, phase: int | None = None) -> dict:
    game = _game(request, game_id)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_view, phase)}


@router.post("/games/{game_id}/step")
async def step(game_id: str, body: Step, request: Request) -> dict:
    game = _game(request, game_id)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_step, body.orders)}


@router.post("/games/{game_id}/preview")
async def preview(game_id: str, body: Step, request: Request) -> dict:
    """The current map with the person's chosen orders drawn, before they are submitted."""
    game = _game(request, game_id)
    return await request.app.state.pool.run(game.locked_preview, body.orders)
