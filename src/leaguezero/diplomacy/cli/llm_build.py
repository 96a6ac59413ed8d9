"""``leaguezero llm pretrain`` and ``llm imitate``: build a small base LM that plays Diplomacy
from bot games (:mod:`leaguezero.diplomacy.llm.base.pretrain`), and teach a base model a LoRA
adapter by imitating a teacher's orders (:mod:`leaguezero.diplomacy.llm.base.imitate`).
Mounted flat by the ``llm`` app (:mod:`leaguezero.diplomacy.cli.llm`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from leaguezero.common.cli import fail
from leaguezero.diplomacy.cli.llm_models import base_model_path

app = typer.Typer()  # mounted flat by the llm app


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
    from leaguezero.diplomacy.llm.base.pretrain import PretrainSettings

    seat_bots, record_bots = _corpus_bots(seats, record)
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
    _build_base(out, settings, force)


def _corpus_bots(seats: str, record: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``--seats`` and ``--record`` as bot names; one line for an unknown bot or an empty
    corpus (no recorded bot among the seats)."""
    from leaguezero.diplomacy.game.catalogue import BOT_NAMES, is_bot

    seat_bots = tuple(b.strip() for b in seats.split(",") if b.strip())
    record_bots = tuple(b.strip() for b in record.split(",") if b.strip())
    unknown = sorted(name for name in set(seat_bots + record_bots) if not is_bot(name))
    if unknown:
        bots = ", ".join(sorted(BOT_NAMES))
        raise fail(f"unknown bot(s) {', '.join(unknown)}; choose from {bots}")
    if not set(record_bots) & set(seat_bots):
        raise fail("--record names no bot of --seats: the corpus would be empty")
    return seat_bots, record_bots


def _build_base(out: Path, settings, force: bool) -> None:
    """Build the base LM of ``settings`` into ``out``; print its summary as one JSON line."""
    from leaguezero.diplomacy.llm.base.pretrain import pretrain as build

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
    # Over 80 lines: twenty-one option declarations, each its --help, and the settings value
    # they make; the checks and the run are the helpers below.
    from leaguezero.diplomacy.llm.base.imitate import AdapterImitationSettings

    base_model, seated, resolver = _imitation_seats(base_model, out, teacher, seats)
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
    _imitate(base_model, out, settings, resolver)


def _imitation_seats(base_model: Path, out: Path, teacher: str, seats: str):
    """``llm imitate``'s checks and its corpus seats: the base model's path, the seat names
    and their resolver (None: all bots); one line for a teacher not seated or an existing
    ``--out``."""
    from leaguezero.diplomacy.cli.common import command_agents, load_diplomacy_config
    from leaguezero.diplomacy.llm.base.imitate import seat_names

    seated = seat_names(seats)
    if teacher not in seated:
        raise fail(f"--teacher {teacher} is not among --seats {seats}")
    base_model = base_model_path(base_model)
    if out.exists():
        raise fail(f"--out {out} exists; choose another folder")
    cfg = load_diplomacy_config(None, [f"llm.base_model={base_model}"])
    _, resolver, cfg = command_agents(list(seated), cfg, sample=False)  # None: all bots
    return base_model, seated, resolver


def _imitate(base_model: Path, out: Path, settings, resolver) -> None:
    """Train the adapter of ``settings`` into ``out``; print its summary as one JSON line."""
    from leaguezero.diplomacy.llm.base.imitate import imitate
    from leaguezero.diplomacy.llm.client import LLMError

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
