"""``yz infer-server`` (serve YatzyNet checkpoints over protocol v2) and ``yz infer-load``/
``yz infer-info`` (hot-swap and inspect a running server). Mounted flat by the ``yz`` app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.yatzy.cli.common import ConfigOpt, SetOpt, load_yatzy_config

app = typer.Typer()  # mounted flat by the yz app

MODEL_NAMES = {"best": 0, "candidate": 1}  # gating serves both from one server
ModelOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        help="PATH, ID=PATH or NAME=PATH (best=0, candidate=1); PATH may be 'dummy' (a fresh "
        "YatzyNet from the config's model section). Repeatable. Default: 0=dummy.",
    ),
]


def parse_model_specs(specs: list[str]) -> dict[int, str]:
    """``["best.pt", "candidate=c.pt", "3=dummy"]`` -> ``{0: "best.pt", 1: "c.pt", 3: "dummy"}``."""
    out: dict[int, str] = {}
    for spec in specs:
        key, sep, path = spec.partition("=")
        if not sep:
            key, path = "0", spec
        if key in MODEL_NAMES:
            model_id = MODEL_NAMES[key]
        elif key.isdigit():
            model_id = int(key)
        else:
            raise ValueError(f"--model {spec!r}: use PATH, ID=PATH, best=PATH or candidate=PATH")
        if model_id in out:
            raise ValueError(f"--model gives model_id {model_id} twice")
        out[model_id] = path
    return out


def make_loader(hidden: int, blocks: int, margin_head: bool, seed: int, dtype=None):
    """A server ModelLoader for YatzyNet checkpoints of either search kind (schema-checked:
    schema 1 for PUCT, 2 for the turn search) and ``dummy`` (a fresh schema-1 net), served in
    ``dtype`` (a torch dtype; None: float32)."""
    import torch

    from leaguezero.az.inference.server import ServedModel
    from leaguezero.yatzy.agents.model import load_yatzy_model
    from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
    from leaguezero.yatzy.game.positions import pov_position_codec, turn_position_codec
    from leaguezero.yatzy.game.turn_features import TURN_FEATURE_SCHEMA_ID
    from leaguezero.yatzy.net.networks import build_net

    def load(source: str) -> ServedModel:
        # Both kinds of net also take compact positions (protocol kind 4) and encode them: a
        # turn-search net for values, a PUCT net for logits and values.
        forward_dtype = dtype or torch.float32
        if source == "dummy":
            net = build_net(hidden=hidden, blocks=blocks, margin_head=margin_head, seed=seed)
            codec = pov_position_codec()
            return ServedModel(
                net.eval(), FEATURE_SCHEMA_ID, "dummy", dtype=forward_dtype, positions=codec
            )
        model, meta = load_yatzy_model(source)
        schema = meta.schema.feature_schema_id
        codecs = {
            TURN_FEATURE_SCHEMA_ID: turn_position_codec,
            FEATURE_SCHEMA_ID: pov_position_codec,
        }
        codec = codecs[schema]() if schema in codecs else None
        return ServedModel(model, schema, source, dtype=forward_dtype, positions=codec)

    return load


@app.command("infer-server")
def infer_server(
    model: ModelOpt = None,
    bind: Annotated[
        str | None,
        typer.Option(
            help="unix://NAME.sock (in your private runtime directory), unix:///path.sock or "
            "tcp://HOST:PORT (default: infer.bind)"
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="Torch device: cpu or cuda.")] = "cpu",
    metrics_port: Annotated[
        int, typer.Option(help="Prometheus /metrics HTTP port (0 = any free port, -1 = off).")
    ] = 0,
    public: Annotated[
        bool, typer.Option(help="Allow TCP and metrics binds reachable from other machines.")
    ] = False,
    threads: Annotated[int, typer.Option(min=1, help="torch threads for the forward pass.")] = 1,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="Forward dtype: auto (bfloat16 on CPUs with native bf16 units and on CUDA), "
            "float32 or bfloat16. Default: selfplay.inference_dtype (self-play's, auto); use "
            "float32 for a server that gates.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for 'dummy' models.")] = 0,
    admin_token_file: Annotated[
        Path | None,
        typer.Option(
            help="Owner-only file with the admin token that infer-load needs over TCP (created "
            "if missing). Default: $LEAGUEZERO_ADMIN_TOKEN_FILE or ~/.leaguezero/"
            "infer_admin_token for TCP; a Unix socket needs no token unless this is given "
            "(then it needs this one).",
        ),
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Serve YatzyNet checkpoints with dynamic batching (infer.max_batch / infer.max_wait_us).

    Prints one line 'listening on ADDRESS metrics PORT models ...' when ready; SIGTERM/SIGINT
    stop it cleanly, SIGHUP reloads every model from its path. Hot-swap one model with
    'yz infer-load --bind ADDRESS --model 1=PATH' (as the same user: over TCP it reads the
    admin token file).
    """
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.set_num_threads(threads)
    cfg = load_yatzy_config(config, set_)
    if device == "cuda" and not torch.cuda.is_available():
        raise fail("--device cuda: no CUDA device is visible to torch")
    _serve(
        cfg,
        model or ["dummy"],
        bind=bind or cfg.infer.bind,
        device=device,
        metrics_port=metrics_port,
        public=public,
        dtype=dtype or cfg.selfplay.inference_dtype,
        seed=seed,
        admin_token_file=admin_token_file,
    )


def _serve(
    cfg,
    model_specs: list[str],
    *,
    bind: str,
    device: str,
    metrics_port: int,
    public: bool,
    dtype: str,
    seed: int,
    admin_token_file: Path | None,
) -> None:
    """``infer-server`` from its parsed options: load the models, serve until a signal; every
    error a user can meet is one line."""
    import asyncio

    from leaguezero.az.checkpoint import CheckpointError
    from leaguezero.az.inference.admin import AdminTokenError, load_or_create_token
    from leaguezero.az.inference.endpoint import BindError, EndpointError, parse_endpoint
    from leaguezero.az.inference.local import resolve_dtype
    from leaguezero.az.inference.server import InferenceServer, ServerError, serve_forever

    try:
        endpoint = parse_endpoint(bind)
        specs = parse_model_specs(model_specs)
        forward_dtype = resolve_dtype(dtype, device)
        loader = make_loader(
            cfg.model.hidden, cfg.model.blocks, cfg.model.margin_head, seed, forward_dtype
        )
        models = {model_id: loader(path) for model_id, path in specs.items()}
        admin_token, token_path = None, None
        if endpoint.scheme == "tcp" or admin_token_file is not None:
            admin_token, token_path = load_or_create_token(admin_token_file)
    except (EndpointError, ValueError, CheckpointError, AdminTokenError) as err:
        raise fail(str(err)) from None
    unix_needs_token = endpoint.scheme == "unix" and admin_token is not None
    settings = _server_settings(cfg.infer, device, public, admin_token, unix_needs_token)
    server = InferenceServer(models, settings, loader=loader)
    metrics_bind = None
    if metrics_port >= 0:
        metrics_bind = ("0.0.0.0" if public else "127.0.0.1", metrics_port)
    described = " ".join(f"{i}={p}" for i, p in sorted(specs.items()))
    described += f" dtype {str(forward_dtype).removeprefix('torch.')}"
    if token_path is not None:
        described += f" admin-token {token_path}"

    def ready(address: str, port: int | None) -> None:
        typer.echo(f"listening on {address} metrics {port} models {described}")

    try:
        asyncio.run(serve_forever(server, endpoint, metrics_bind, ready))
    except (ServerError, BindError) as err:
        raise fail(str(err)) from None
    except OSError as err:  # e.g. the TCP or metrics port is taken
        raise fail(f"cannot serve on {endpoint}: {err.strerror or err}") from None


def _server_settings(infer, device: str, public: bool, admin_token, unix_needs_token: bool):
    """The server's :class:`~leaguezero.az.inference.server.ServerSettings` from the config's
    ``infer`` section and the command's options."""
    from leaguezero.az.inference.server import ServerSettings

    return ServerSettings(
        max_batch=infer.max_batch,
        max_wait_us=infer.max_wait_us,
        eager_flush=infer.eager_flush,
        forward_on=infer.forward_on,
        device=device,
        public=public,
        admin_token=admin_token,
        unix_needs_token=unix_needs_token,
        max_connections=infer.max_connections,
        max_connections_per_peer=infer.max_connections_per_peer,
        handshake_timeout_s=infer.handshake_timeout_s,
        max_held_bytes=infer.max_held_mb * 1024 * 1024,
        max_forward_bytes=infer.max_forward_mb * 1024 * 1024,
    )


def _client(bind: str):
    from leaguezero.az.inference.client import InferenceClient
    from leaguezero.yatzy.game.features import FEATURE_SCHEMA_ID
    from leaguezero.yatzy.game.tables import NUM_ACTIONS

    return InferenceClient(
        bind, feature_schema_id=FEATURE_SCHEMA_ID, num_actions=NUM_ACTIONS, connect_timeout_s=5
    )


@app.command("infer-load")
def infer_load(
    bind: Annotated[str, typer.Option(help="The running server's address.")],
    model: Annotated[str, typer.Option(help="ID=PATH (or best=/candidate=) to load.")],
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="The server's admin token file (default: $LEAGUEZERO_ADMIN_TOKEN_FILE or "
            "~/.leaguezero/infer_admin_token); it signs the server's challenge over TCP, and over "
            "a Unix socket only when the server asks for it (the token itself is never sent)."
        ),
    ] = None,
) -> None:
    """Hot-swap one model of a running server (the path is read by the server)."""
    from leaguezero.az.inference.admin import AdminTokenError, read_token
    from leaguezero.az.inference.client import InferenceError

    try:
        ((model_id, path),) = parse_model_specs([model]).items()
        token = read_token(token_file)
        with _client(bind) as client:
            typer.echo(json.dumps(client.load_model(model_id, path, admin_token=token)))
    except (ValueError, ConnectionError, InferenceError, AdminTokenError) as err:
        raise fail(str(err)) from None


@app.command("infer-info")
def infer_info(bind: Annotated[str, typer.Option(help="The running server's address.")]) -> None:
    """Print the models a running server serves (JSON)."""
    try:
        with _client(bind) as client:
            typer.echo(json.dumps(client.info()))
    except (ValueError, ConnectionError) as err:
        raise fail(str(err)) from None
