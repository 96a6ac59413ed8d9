"""Peak memory and CPU of a GRPO step's training passes, with and without handing freed memory
back to the system between passes (glibc's ``malloc_trim``).

    OMP_NUM_THREADS=1 python benchmarks/llm_train_trim.py --base-model smollm2 --pairs 3

Each run is a fresh process pinned to one core (``LEAGUEZERO_BENCH_CORE``, default 0): load the
base with a LoRA adapter, take ``--records`` real prompts of different lengths (every power's
prompt over the phases of a game of random orders, rendered as the league renders them), each
with a five-order answer, and run one forward + backward pass a record as the trainer does on a
CPU (one record a pass; gradients accumulate). Between passes:

- ``none``: nothing (glibc keeps what a pass freed, and a longer record later may not fit in it);
- ``always``: ``malloc_trim`` after every pass;
- ``over``: ``malloc_trim`` after a pass only when the process's RSS is above ``--over-gb``.

Interleaved (none, always, over, none, ...) over ``--pairs`` rounds; prints each run's peak RSS
(``VmHWM``, the load included) and the passes' CPU, and each mode's ratios to ``none``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, random, sys, time, torch
torch.set_num_threads(1)
from leaguezero.common.memory import release_freed_memory, rss_mb
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, render_prompt
base, records, mode, over_gb = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
lora = LoraSettings(rank=8, alpha=16, target_modules="auto")
backend = HFBackend.from_pretrained(base, lora=lora)
backend.add_adapter("hero")
params = backend.trainable_parameters("hero")  # the adapter trains: its gradients on
rng = random.Random(0)
env, prompts = DiplomacyEnv(max_years=3), []
while len(prompts) < records and not env.done:
    for power in POWERS:
        legal = env.legal_orders(power)
        if legal and len(prompts) < records:
            prompts.append(render_prompt(backend.tokenizer, build_prompt(env, power, legal)))
        env.set_orders(power, [rng.choice(o) for o in legal.values() if o])
    env.process()
text = "1) A MOS - UKR\n2) F SEV - BLA\n3) F STP/SC - BOT\n4) A WAR - GAL\nEND\n"
answer = list(backend.tokenizer(text)["input_ids"]) + [backend.eos_id]
release_freed_memory()
open("/proc/self/clear_refs", "w").write("5")  # the peak from here (the load's RSS stays)
started = time.process_time()
trims = 0
for prompt in prompts:
    backend.logprobs([prompt], [answer], "hero")[0].sum().backward()
    if mode == "always" or (mode == "over" and rss_mb() > over_gb * 1024):
        release_freed_memory()
        trims += 1
cpu = time.process_time() - started
peak = int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) / 2**20
lengths = [len(backend.encode(p)) for p in prompts]
print(json.dumps({"peak_gib": peak, "cpu_s": cpu, "trims": trims, "records": len(prompts),
                  "tokens": [min(lengths), max(lengths)]}))
"""

MODES = ("none", "always", "over")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="smollm2", help="a folder, .gguf or smollm2")
    parser.add_argument("--records", type=int, default=24)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--over-gb", type=float, default=2.5)
    args = parser.parse_args()
    from leaguezero.diplomacy.cli.llm_models import base_model_path

    base = str(base_model_path(Path(args.base_model)))  # smollm2: the wheel's GGUF file
    core = os.environ.get("LEAGUEZERO_BENCH_CORE", "0")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for round_ in range(args.pairs):
        for mode in MODES:
            argv = [base, str(args.records), mode, str(args.over_gb)]
            out = subprocess.run(
                ["taskset", "-c", core, sys.executable, "-c", CHILD, *argv],
                capture_output=True, text=True, env=env,
            )  # fmt: skip
            if out.returncode:
                raise SystemExit(f"the {mode} run failed:\n{out.stderr[-3000:]}")
            row = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(row)
            print(
                f"round {round_ + 1} {mode:>6}: peak {row['peak_gib']:.2f} GiB, "
                f"{row['cpu_s']:.1f} CPU-s, {row['trims']} trims ({row['records']} records, "
                f"{row['tokens'][0]}-{row['tokens'][1]} prompt tokens)",
                flush=True,
            )
    for mode in MODES[1:]:
        pairs = list(zip(runs["none"], runs[mode], strict=True))
        peak = [b["peak_gib"] / a["peak_gib"] for a, b in pairs]
        cpu = [b["cpu_s"] / a["cpu_s"] for a, b in pairs]
        print(
            f"{mode:>6} / none: peak {statistics.median(peak):.2f}x "
            f"({', '.join(f'{r:.2f}' for r in peak)}), CPU {statistics.median(cpu):.2f}x "
            f"({', '.join(f'{r:.2f}' for r in cpu)})"
        )


if __name__ == "__main__":
    main()
