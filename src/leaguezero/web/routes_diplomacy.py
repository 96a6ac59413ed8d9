"""``/api/diplomacy``: start a game to watch or play, step it, browse its phases, replay an
uploaded saved game."""

from __future__ import annotations

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
from leaguezero.web.sessions import session_of

router = APIRouter(prefix="/api/diplomacy")
MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # a 20-year saved game is a few MB


class NewGame(BaseModel):
    agents: dict[str, Annotated[str, Field(max_length=500)]]
    human: str | None = None
    max_years: Annotated[int, Field(ge=1, le=MAX_YEARS)] = 2
    seed: Annotated[int, Field(ge=0, lt=2**31)] = 0


class Step(BaseModel):
    orders: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=40)] = []


def _game(request: Request, game_id: str) -> DiplomacyWebGame:
    game = request.app.state.games.get(session_of(request), game_id)
    if not isinstance(game, DiplomacyWebGame):
        raise ValueError(f"game {game_id!r} is not a Diplomacy game")
    return game


@router.get("/agents")
def agents() -> dict:
    return agent_choices()


@router.post("/games")
def start(body: NewGame, request: Request) -> dict:
    human = body.human.upper() if body.human else None
    agents = {power.upper(): name for power, name in body.agents.items()}
    game = new_game(agents, human, body.max_years, body.seed)
    game_id = request.app.state.games.add(session_of(request), game)
    with game.lock:
        return {"id": game_id, **game.view()}


@router.post("/replays")
async def replay(request: Request) -> dict:
    body = await request.body()
    if len(body) > MAX_UPLOAD_BYTES:
        raise ValueError(f"the saved game is over {MAX_UPLOAD_BYTES // 2**20} MB")
    import json

    try:
        saved: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the upload is not JSON ({err})") from None
    if not isinstance(saved, dict):
        raise ValueError("the upload is not a saved game (a JSON object)")
    game = load_replay(saved)
    game_id = request.app.state.games.add(session_of(request), game)
    with game.lock:
        return {"id": game_id, **game.view(0)}


@router.get("/games/{game_id}")
def show(game_id: str, request: Request, phase: int | None = None) -> dict:
    game = _game(request, game_id)
    with game.lock:
        return {"id": game_id, **game.view(phase)}


@router.post("/games/{game_id}/step")
def step(game_id: str, body: Step, request: Request) -> dict:
    game = _game(request, game_id)
    with game.lock:
        game.step(body.orders)
        return {"id": game_id, **game.view()}
