"""``leaguezero cluster``: start, inspect and stop a local Ray head node
(docs/guides/cluster.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

StateDirOpt = Annotated[
    Path | None,
    typer.Option(help="Where the cluster's pid, address and log are kept (default: user cache)."),
]


def _state_dir(state_dir: Path | None) -> Path:
    from leaguezero.distributed.cluster import default_state_dir

    return state_dir if state_dir is not None else default_state_dir()


@app.command()
def start(
    port: Annotated[int, typer.Option(help="GCS port of the head (0: any free port).")] = 6379,
    num_cpus: Annotated[
        int | None, typer.Option(help="CPUs the head offers (default: all).")
    ] = None,
    node_ip: Annotated[
        str, typer.Option(help="Address the head binds; a reachable IP for other machines.")
    ] = "127.0.0.1",
    state_dir: StateDirOpt = None,
) -> None:
    """Start a Ray head node in the background and print its address."""
    from leaguezero.distributed.cluster import ClusterError, start_head
    from leaguezero.distributed.runtime import RayUnavailableError

    try:
        info = start_head(_state_dir(state_dir), port=port, num_cpus=num_cpus, node_ip=node_ip)
    except (ClusterError, RayUnavailableError) as err:
        raise fail(str(err)) from None
    typer.echo(f"ray head at {info.address} (pid {info.pid}, log {info.log})")
    typer.echo(f"use it: yz run --backend ray --set run.ray_address={info.address}")
    typer.echo(f"    or: export RAY_ADDRESS={info.address}")
    typer.echo(f"join it from another machine: ray start --address={info.address}")


@app.command()
def status(state_dir: StateDirOpt = None) -> None:
    """Show the cluster started here: address, nodes and resources (``ray status``)."""
    from leaguezero.distributed.cluster import ClusterError
    from leaguezero.distributed.cluster import status as cluster_status

    try:
        info, text = cluster_status(_state_dir(state_dir))
    except ClusterError as err:
        raise fail(str(err)) from None
    typer.echo(f"ray head at {info.address} (pid {info.pid})")
    typer.echo(text)


@app.command()
def stop(state_dir: StateDirOpt = None) -> None:
    """Stop the cluster that `leaguezero cluster start` started (no other Ray instance)."""
    from leaguezero.distributed.cluster import stop as cluster_stop

    info = cluster_stop(_state_dir(state_dir))
    if info is None:
        typer.echo("no cluster started here")
        return
    typer.echo(f"stopped the ray head at {info.address} (pid {info.pid})")
