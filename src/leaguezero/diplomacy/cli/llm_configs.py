"""The configs ``leaguezero llm config-write`` writes: each file's header comment and what it
sets beyond the built-in defaults (``configs/diplomacy_vllm.yaml``,
``configs/diplomacy_llm_cpu.yaml``)."""

from __future__ import annotations

VLLM_CONFIG_HEADER = """Diplomacy league training of an LLM hero sampled by vLLM: the recipe that
learned here (docs/diplomacy_training.md): constrained decoding (each seat's legal orders
sent as vLLM's structured_outputs regex), a cosine learning rate from 2e-3, KL 0.1 to the
base, LoRA rank 8 on all seven projections, 3-year games. Start the server first (its own
environment, vLLM >= 0.10.2; docs/llm.md "Deployment"), then the trainer beside it:
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve /models/BASE --enable-lora --max-loras 8 \\
      --max-lora-rank 16 --gpu-memory-utilization 0.6 --port 8000
  leaguezero diplomacy train --config configs/diplomacy_vllm.yaml --out /runs/llm \\
      --set llm.base_model=/models/BASE
The same on a CPU, against leaguezero llm serve (a base built by leaguezero llm pretrain):
  leaguezero llm serve --base-model models/dip_base --port 8000 --max-loras 8 &
  leaguezero diplomacy train --config configs/diplomacy_vllm.yaml --out runs/llm \\
      --set llm.base_model=models/dip_base --set llm.device=cpu --set llm.dtype=float32
Regenerate: leaguezero llm config-write configs/diplomacy_vllm.yaml"""
# What differs from the built-in defaults in configs/diplomacy_vllm.yaml: the CPU recipe's
# learning settings (below) with vLLM sampling and a bf16 trainer on the GPU.
VLLM_OVERRIDES = [
    "train.agent=llm",
    "llm.backend=openai",
    "llm.base_model=models/base",
    "llm.device=cuda",
    "llm.dtype=bfloat16",
    "llm.mode=constrained",
    "max_years=3",
    "games_dir=null",
    "train.steps=100",
    "train.lr=0.002",
    "train.lr_schedule=cosine",
    "train.kl_coef=0.1",
    "league.eval_every=20",
    "league.eval_games=10",
]


CPU_CONFIG_HEADER = """Diplomacy league training of an LLM hero on a CPU (the documented run):
constrained decoding (every order legal), sampled in this process on one thread (two threads
gain little on an idle 2-core machine and collapse beside other work; docs/llm.md).
Build the base model first (docs/llm.md), then train:
  leaguezero llm pretrain --out models/dip_base
  leaguezero diplomacy train --config configs/diplomacy_llm_cpu.yaml --out runs/llm
The same through the vLLM interface (a server process samples, the trainer trains):
  leaguezero llm serve --base-model models/dip_base --served-model-name dip_base \\
      --port 8123 --max-loras 8 &
  leaguezero diplomacy train --config configs/diplomacy_llm_cpu.yaml --out runs/llm \\
      --set llm.backend=openai
Regenerate: leaguezero llm config-write configs/diplomacy_llm_cpu.yaml --cpu"""
# What differs from the built-in defaults in configs/diplomacy_llm_cpu.yaml.
CPU_OVERRIDES = [
    "train.agent=llm",
    "llm.backend=hf",
    "llm.base_model=models/dip_base",
    "llm.endpoint=http://127.0.0.1:8123",
    "llm.served_model_name=dip_base",
    "llm.mode=constrained",
    "max_years=3",
    "games_dir=null",
    "train.steps=100",
    "train.lr=0.002",
    "train.lr_schedule=cosine",
    "train.kl_coef=0.1",
    "llm.max_new_tokens=192",
    "league.eval_every=20",
    "league.eval_games=10",
]
