"""The FastAPI app of ``leaguezero web``: pages, per-session games and one-line errors.

Each browser gets a session id in a cookie, issued and signed by the server
(:class:`~leaguezero.web.sessions.SessionKeys`: a cookie it did not sign is replaced); games live
in a :class:`GameStore` under that id. Every request passes
:class:`~leaguezero.web.guard.RequestGuard` first (Host, cross-site writes, body size); agents
move in a bounded :class:`~leaguezero.web.workers.AgentPool`. Every error a request can cause
comes back as a 4xx with ``{"error": "<one line>"}`` (a 503 when the pool is busy); an unexpected
one is a 500 that says only that, the traceback in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from leaguezero.web.guard import RequestGuard
from leaguezero.web.sessions import GameNotFound, GameStore, SessionKeys, StoreFull
from leaguezero.web.workers import AgentPool, Busy

STATIC = Path(__file__).resolve().parent / "static"
SESSION_COOKIE = "lz_session"
PAGES = ("yatzy", "diplomacy", "runs")
log = logging.getLogger(__name__)


@dataclass
class WebSettings:
    """What ``leaguezero web`` was started with: the runs it follows, the host names it answers
    to besides addresses and ``localhost`` (the bound name, ``--allow-host``), the game limits."""

    runs: list[Path] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    max_games: int = 32
    ttl_s: float = 3600.0
    oracle_table: Path | None = None  # None: the oracle's cached default table


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def create_app(settings: WebSettings | None = None) -> FastAPI:
    """Build the app: static pages, the Yatzy, Diplomacy and run routes, error handlers."""
    from leaguezero.web.routes_diplomacy import router as diplomacy_router
    from leaguezero.web.routes_runs import router as runs_router
    from leaguezero.web.routes_yatzy import router as yatzy_router

    app = FastAPI(title="leaguezero", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings or WebSettings()
    app.state.games = GameStore(app.state.settings.max_games, app.state.settings.ttl_s)
    app.state.pool = AgentPool()
    app.add_middleware(RequestGuard, allowed_hosts=app.state.settings.allowed_hosts)

    keys = SessionKeys()  # a fresh key per process: no id of a past run is taken

    @app.middleware("http")
    async def session_cookie(request: Request, call_next):
        sid = request.cookies.get(SESSION_COOKIE, "")
        fresh = not keys.verify(sid)
        if fresh:
            sid = keys.issue()
        request.state.session = sid
        response = await call_next(request)
        if fresh:
            response.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict")
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, err: RequestValidationError):
        problems = [
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}"
            for e in err.errors()[:3]
        ]
        return JSONResponse({"error": "; ".join(problems) or "bad request"}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, err: HTTPException):
        return JSONResponse({"error": str(err.detail)}, status_code=err.status_code)

    @app.exception_handler(GameNotFound)
    async def no_game(_request: Request, err: GameNotFound):
        return JSONResponse({"error": _first_line(err)}, status_code=404)

    @app.exception_handler(Busy)
    @app.exception_handler(StoreFull)
    async def busy(_request: Request, err: RuntimeError):
        return JSONResponse({"error": str(err)}, status_code=503, headers={"Retry-After": "2"})

    @app.exception_handler(ValueError)
    async def bad_value(_request: Request, err: ValueError):
        return JSONResponse({"error": _first_line(err)}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, err: Exception):
        log.exception("unexpected error")  # the traceback goes to the server's log only
        # Not the error's text: a library's message may carry paths or advice meant for a
        # programmer (torch's weights_only=False).
        return JSONResponse(
            {"error": f"internal error ({type(err).__name__}); the server's log has the details"},
            status_code=500,
        )

    app.include_router(yatzy_router)
    app.include_router(diplomacy_router)
    app.include_router(runs_router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        return RedirectResponse("/static/favicon.svg")

    for page in PAGES:
        app.add_api_route(f"/{page}", _page(page), methods=["GET"], include_in_schema=False)
    return app


def _page(name: str):
    def serve():
        return FileResponse(STATIC / f"{name}.html")

    return serve


def serve(
    host: str, port: int, settings: WebSettings, on_ready: Callable[[], None] | None = None
) -> None:
    """Run the app with uvicorn (``web/server.py``'s limits) until interrupted; ``on_ready`` is
    called once the socket listens (a "serving on" printed before that sends the user to a
    refused connection while the app and uvicorn still start)."""
    from leaguezero.web.server import ReadyServer, raise_file_limit, uvicorn_config

    raise_file_limit()
    settings.allowed_hosts = [host, *settings.allowed_hosts]
    from leaguezero.web.workers import start_children

    threading.Thread(target=start_children, name="leaguezero-forkserver", daemon=True).start()
    ReadyServer(uvicorn_config(create_app(settings), host, port), on_ready=on_ready).run()
