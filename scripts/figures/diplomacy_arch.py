"""Issue 53, item 4: which network shape pays, measured on one imitation corpus.

    python scripts/figures/diplomacy_arch.py --out DIR --games 400 --val-games 80 --years 10 \\
        --epochs 6 --shapes 64x2,128x2,64x4,64x2a4

plays the bot corpus once (``leaguezero diplomacy pretrain-policy``'s corpus: ``dumb_bot`` taught
in ten-year games among every bot, games ``0..games`` to train on and ``val_games`` after them
held out), then trains one sequential policy with a value head per shape on it (``HxL``: width H,
L graph layers; ``aN``: N heads of attention over the map's locations), each with the same seed,
epochs, batch and learning rate, and writes ``DIR/HxL[aN].pt`` with its report (held-out loss,
accuracy, value calibration and the curve; the report's command makes that network again) and
``DIR/arch.jsonl`` (a line per shape: parameters, held-out figures, CPU seconds of training).
Shapes already in ``arch.jsonl`` are not trained again. At the end it prints each shape's
held-out log-loss against the first shape's, paired choice by choice (mean difference ± its SE
over the held-out choices; the held-out games are played again when every shape was already
trained). Their play is measured afterwards with ``diplomacy_table.py --agents
DIR/64x2.pt,DIR/128x2.pt,...`` (paired on common seeds).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import time
from dataclasses import replace
from pathlib import Path

import torch

from leaguezero.diplomacy.agents.policy import load_policy
from leaguezero.diplomacy.train.imitation import collect_corpus, play_corpora, pretrain_policy
from leaguezero.diplomacy.train.imitation_settings import PolicyImitationSettings

SHAPE = re.compile(r"^(\d+)x(\d+)(?:a(\d+))?$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"128x2"`` -> (128, 2, 0); ``"64x2a4"`` -> (64, 2, 4); anything else: ValueError."""
    match = SHAPE.match(text.strip())
    if not match:
        raise ValueError(f"shape {text!r} is not HxL or HxLaN (e.g. 64x2, 128x3, 64x2a4)")
    hidden, layers, heads = match.groups()
    return int(hidden), int(layers), int(heads or 0)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="64x2,128x2,64x4,64x2a4")
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument("--val-games", type=int, default=80)
    parser.add_argument("--years", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--value-coef", type=float, default=0.5)
    args = parser.parse_args()
    shapes = [parse_shape(s) for s in args.shapes.split(",") if s.strip()]
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "arch.jsonl"
    done = {json.loads(line)["shape"] for line in table.open()} if table.exists() else set()
    base = PolicyImitationSettings(
        games=args.games,
        val_games=args.val_games,
        max_years=args.years,
        epochs=args.epochs,
        seed=args.seed,
        decoder="sequential",
        value_coef=args.value_coef,
    )
    todo = [s for s in shapes if _name(s) not in done]
    if not todo:
        print(f"every shape is in {table}")
        held_out = collect_corpus(
            range(base.games, base.games + base.val_games),
            teacher=base.teacher,
            seat_bots=base.seat_bots,
            max_years=base.max_years,
            seed=base.seed,
        )
        paired_losses(args.out, [_name(s) for s in shapes], held_out.records)
        return
    corpora = play_corpora(base, print)
    for hidden, layers, heads in todo:
        name = _name((hidden, layers, heads))
        settings = replace(base, hidden=hidden, layers=layers, attention=heads)
        cpu, wall = _cpu(), time.perf_counter()
        report = pretrain_policy(
            args.out / f"{name}.pt", settings, corpora=corpora, overwrite=True, log=print
        )
        value = report["val_value"] or {}
        row = {
            "shape": name,
            "hidden": hidden,
            "layers": layers,
            "attention": heads,
            "parameters": report["parameters"],
            "val_loss": report["val_loss"],
            "val_accuracy": report["val_accuracy"],
            "train_loss": report["train_loss"],
            "value_r2": value.get("r2"),
            "train_cpu_s": round(_cpu() - cpu, 1),
            "train_wall_s": round(time.perf_counter() - wall, 1),
            "choices": report["corpus"]["train"]["choices"],
            "val_choices": report["corpus"]["held_out"]["choices"],
            "command": report["command"],
        }
        with table.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row))
    paired_losses(args.out, [_name(s) for s in shapes], corpora[1].records)


def choice_losses(path: Path, records: list) -> torch.Tensor:
    """``-log p(teacher's order)`` of each held-out choice under the network at ``path``."""
    policy = load_policy(path)
    out = []
    with torch.no_grad():
        for start in range(0, len(records), 2048):
            log_probs, chosen = policy.candidate_log_probs(records[start : start + 2048])
            out.append(-log_probs.gather(1, chosen.unsqueeze(1)).squeeze(1))
    return torch.cat(out).double()


def paired_losses(out: Path, names: list[str], records: list) -> list[str]:
    """Each shape's held-out loss minus the first shape's, choice by choice: mean ± SE."""
    first = choice_losses(out / f"{names[0]}.pt", records)
    lines = [f"held-out log-loss, paired over {len(records)} choices (minus {names[0]}'s):"]
    lines.append(f"  {names[0]}: {first.mean():.4f}")
    for name in names[1:]:
        loss = choice_losses(out / f"{name}.pt", records)
        diff = loss - first
        se = diff.std() / len(diff) ** 0.5
        lines.append(f"  {name}: {loss.mean():.4f}, difference {diff.mean():+.4f} ± {se:.4f}")
    print("\n".join(lines))
    return lines


def _name(shape: tuple[int, int, int]) -> str:
    hidden, layers, heads = shape
    return f"{hidden}x{layers}" + (f"a{heads}" if heads else "")


if __name__ == "__main__":
    main()
