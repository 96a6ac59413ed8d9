"""``leaguezero web``: serve the local web app (play Yatzy, Diplomacy on the map, runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail

app = typer.Typer()  # mounted flat by the leaguezero app


@app.command("web")
def web(
    host: Annotated[
        str, typer.Option(help="Address to bind; the default serves this machine only.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    run: Annotated[
        list[Path] | None,
        typer.Option("--run", help="A run directory to follow (a yz run or a league run); repeat."),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A host name the app answers to besides its address and localhost (a name "
            "this machine has on your network); repeat. Other names are refused (DNS rebinding).",
        ),
    ] = None,
    max_games: Annotated[
        int, typer.Option(min=1, help="Live games kept at once (all browsers together).")
    ] = 32,
    threads: Annotated[
        int,
        typer.Option(
            min=1,
            help="torch threads of the agents' moves (each of the app's agent workers uses "
            "this many; 1 keeps a shared machine usable).",
        ),
    ] = 1,
) -> None:
    """Serve the web app: play Yatzy against an agent, watch or play Diplomacy on the map,
    replay a saved game, and follow runs."""
    try:
        from leaguezero.web.app import WebSettings, serve
    except ImportError as err:
        raise fail(f"{err}: the web app needs pip install 'leaguezero[web]'") from None
    import torch

    # The agents (Yatzy networks, Diplomacy policies and LLMs) run in this process: one torch
    # thread each unless told otherwise, as every other command (docs/guides/llm.md, threads).
    torch.set_num_threads(threads)
    runs = list(run or [])
    missing = [str(r) for r in runs if not r.is_dir()]
    if missing:
        raise fail(f"--run: no such directory: {', '.join(missing)}")
    url = f"http://{host}:{port}/"
    try:
        settings = WebSettings(runs=runs, allowed_hosts=list(allow_host or []), max_games=max_games)
        # printed once the socket listens, not before the app and uvicorn have started
        serve(
            host, port, settings, on_ready=lambda: typer.echo(f"serving on {url}  (Ctrl-C stops)")
        )
    except OSError as err:
        raise fail(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
