"""``/api/runs`` and ``/runs/N/...``: the runs given with ``--run``, by their index only (a
request never names a path, so the app serves nothing outside those folders), shown by their
folder's name (an answer never carries a path of this machine)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from starlette.exceptions import HTTPException

from leaguezero.web.runs import YATZY_STATS, elo_chart, league_view, run_kinds, yatzy_status
from leaguezero.web.yatzy_games import run_report

router = APIRouter()


def _run(request: Request, index: int) -> Path:
    runs = request.app.state.settings.runs
    if not 0 <= index < len(runs):
        raise HTTPException(404, f"no run {index}: this server follows {len(runs)} run(s)")
    return Path(runs[index])


@router.get("/api/runs")
def runs(request: Request) -> dict:
    out = []
    for i, run in enumerate(request.app.state.settings.runs):
        out.append({"index": i, "name": Path(run).name, "kinds": run_kinds(run)})
    return {"runs": out}


@router.get("/api/runs/{index}")
def run(index: int, request: Request) -> dict:
    path = _run(request, index)
    kinds = run_kinds(path)
    view: dict = {"index": index, "name": path.name, "kinds": kinds}
    if "league" in kinds:
        view["league"] = league_view(path)
    if "yatzy" in kinds:  # the page reloads the report when this changes
        view["stats_mtime"] = (path / YATZY_STATS).stat().st_mtime
        view["yatzy_status"] = yatzy_status(path)
    return view


@router.get("/runs/{index}/report")
def report(index: int, request: Request) -> HTMLResponse:
    path = _run(request, index)
    if "yatzy" not in run_kinds(path):
        raise HTTPException(
            404, f"run {path.name} has no Yatzy stats yet (logs/iteration_stats.ndjson)"
        )
    html = run_report(path).read_text(encoding="utf-8")
    for shown in {str(path.resolve()), str(path.absolute()), str(path)}:  # the report names
        html = html.replace(shown, path.name)  # its run by path: show the folder's name only
    return HTMLResponse(html)


@router.get("/runs/{index}/elo.png")
def elo(index: int, request: Request) -> FileResponse:
    path = _run(request, index)
    state = request.app.state
    if getattr(state, "chart_root", None) is None:  # charts are drawn outside the run folders
        state.chart_root = Path(tempfile.mkdtemp(prefix="leaguezero_web_"))
    try:
        chart = elo_chart(path, state.chart_root / str(index))
    except FileNotFoundError as err:
        raise HTTPException(404, str(err)) from None
    return FileResponse(chart, media_type="image/png", headers={"Cache-Control": "no-store"})
