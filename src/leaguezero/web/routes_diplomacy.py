"""``/api/diplomacy``: start a game to watch or play, step it, browse its phases, replay an
uploaded saved game.

Agents, the engine and the map renderer run in the app's bounded pool
(``request.app.state.pool``); an upload is parsed there too, within
:data:`~leaguezero.web.limits.UPLOAD_TIMEOUT_S`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from leaguezero.web.diplomacy_games import (
    MAX_YEARS,
    DiplomacyWebGame,
    agent_choices,
    load_replay,
    new_game,
)
from leaguezero.web.limits import UPLOAD_TIMEOUT_S
from leaguezero.web.sessions import session_of
from leaguezero.web.workers import TookTooLong

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
    game = await request.app.state.pool.run(new_game, agents, human, body.max_years, body.seed)
    game_id = request.app.state.games.add(session_of(request), game)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_view)}


def _parse_upload(body: bytes) -> DiplomacyWebGame:
    try:
        saved: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the upload is not JSON ({err})") from None
    game = load_replay(saved)
    game.locked_view(0)  # the first phase renders, or the upload is refused here
    return game


@router.post("/replays")
async def replay(request: Request) -> dict:
    body = await request.body()  # bounded by the guard (limits.MAX_UPLOAD_BYTES) as it arrives
    try:
        game = await request.app.state.pool.run(_parse_upload, body, timeout_s=UPLOAD_TIMEOUT_S)
    except TookTooLong:
        raise ValueError(f"the saved game took over {UPLOAD_TIMEOUT_S:g} s to read") from None
    game_id = request.app.state.games.add(session_of(request), game)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_view, 0)}


@router.get("/games/{game_id}")
async def show(game_id: str, request: Request, phase: int | None = None) -> dict:
    game = _game(request, game_id)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_view, phase)}


@router.post("/games/{game_id}/step")
async def step(game_id: str, body: Step, request: Request) -> dict:
    game = _game(request, game_id)
    return {"id": game_id, **await request.app.state.pool.run(game.locked_step, body.orders)}
