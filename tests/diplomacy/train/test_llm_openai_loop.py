"""The league loop sampling through the vLLM interface (``llm.backend: openai``), end to end.

A real ``leaguezero llm serve`` process (``--max-loras 3 --max-cpu-loras 6``) on loopback;
the trainer holds the same base model in process for gradients. Shows: each update is
published as a new immutable hero version and hot-loaded, the superseded one unloaded; a
group's games meet in the server's batches with distinct adapters per power; the hero adapter
changes with non-zero advantages (the format term makes a tiny model's tied games differ); the
evaluator plays through the server under its own adapter names; a refused load falls back to
cluster seating.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import httpx
import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.llm.remote.adapters import run_prefix
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.train.loop import LeagueTrainer
from leaguezero.league.registry import LeagueRegistry
from leaguezero.league.session import HERO
from tests.diplomacy.tiny_lm import start_llm_server


@pytest.fixture(scope="module")
def server(tiny_lm):
    proc, url = start_llm_server(tiny_lm, "--max-loras", "3", "--max-cpu-loras", "6")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def _cfg(tiny_lm, url: str, *extra: str) -> DiplomacyConfig:
    return load_config(
        DiplomacyConfig,
        None,
        [
            "train.agent=llm",
            "llm.backend=openai",
            f"llm.base_model={tiny_lm}",
            f"llm.endpoint={url}",
            "llm.served_model_name=tiny",
            "llm.max_new_tokens=12",
            "llm.lora_rank=4",
            "llm.max_loras=3",
            "llm.format_penalty=2.0",
            "max_years=1",
            "train.group_size=3",
            "train.lr=0.02",
            "train.kl_coef=0.05",
            "league.eval_every=2",
            "league.eval_games=1",
            "league.bootstrap=0",
            *extra,
        ],
    )


def test_openai_backend_trains_publishes_hot_loads_and_evaluates(tiny_lm, server, tmp_path):
    run = tmp_path / "run"
    trainer = LeagueTrainer(_cfg(tiny_lm, server, "train.steps=2"), run)
    before = trainer.hero.weights()
    trainer.run()

    events = read_events(run / "events.ndjson")
    steps = [e for e in events if e["event"] == "diplomacy.train_step"]
    assert [e["step"] for e in steps] == [1, 2]
    assert all(e["llm_completions"] > 0 and "llm_truncated" in e for e in steps)
    assert all(e["records"] > 0 and e["adv_abs_mean"] > 0 for e in steps)
    # The sampled log-probs came from the server; the trainer recomputed them.
    assert all(e["old_log_prob_gap"] < 1e-2 for e in steps)
    after = trainer.hero.weights()
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert any(float(w.abs().max()) > 0 for n, w in after.items() if "lora_B" in n)

    # Published versions: one per set of weights that played; only the newest is loaded.
    # Served names carry the run's own id (run_prefix), not only its folder's name.
    prefix = run_prefix(run)
    assert prefix.startswith("run-") and prefix != "run-hero"
    published = sorted(p.name for p in (run / "adapters").iterdir())
    assert published == [f"{prefix}-v0001", f"{prefix}-v0002"]
    with OpenAIClient(server) as client:
        loaded = client.list_adapters()
        assert f"{prefix}-v0002" in loaded and f"{prefix}-v0001" not in loaded
        # The evaluator played the checkpoint through the server under its own name.
        assert any(name.startswith("eval-ckpt_000001-") for name in loaded)
    rated = [e for e in events if e["event"] == "league.elo_updated"]
    assert rated and rated[-1]["challenger"] == "ckpt_000001"

    # One group with the hero, a league adapter and the base model: the server batched rows
    # of distinct adapters together, and the adapter opponent was hot-loaded by name.
    again = LeagueTrainer(_cfg(tiny_lm, server, "train.steps=3"), run, resume=True)
    seats = (HERO, "ckpt_000001", "base_model", "ckpt_000001", "random_bot", "chaos_bot", HERO)
    groups, _ = again.play_group(7, parse_seating(dict(zip(POWERS, seats, strict=True))), "AUSTRIA")
    assert len(groups) == 2 and all(s.records for g in groups for s in g)  # AUSTRIA, TURKEY
    stats = httpx.get(f"{server}/stats").json()
    assert stats["max_adapters_in_batch"] >= 2 and stats["max_loras"] == 3
    assert stats["max_adapters_in_batch"] <= 3
    with OpenAIClient(server) as client:
        # Served under the run's own name: another run's ckpt_000001 on this server is another.
        served = again.hero.served_name("ckpt_000001")
        assert served == f"{prefix.removesuffix('-hero')}-ckpt_000001"
        assert served in client.list_adapters() and "ckpt_000001" not in client.list_adapters()
    again.session.close()
    again.hero.close()


def test_refused_adapter_loads_fall_back_to_cluster_seating(tiny_lm, tmp_path):
    # A server that holds at most two adapters: the live hero and one opponent.
    proc, url = start_llm_server(tiny_lm, "--max-cpu-loras", "2")
    try:
        run = tmp_path / "run"
        trainer = LeagueTrainer(_cfg(tiny_lm, url, "train.steps=1", "llm.max_loras=8"), run)
        trainer.run()  # ckpt_000001 exists now
        # Two more adapter checkpoints to seat (copies of the first under league names).
        registry = LeagueRegistry(run / "league.json")

        for name in ("ckpt_000002", "ckpt_000003"):
            shutil.copytree(run / "checkpoints" / "ckpt_000001", run / "checkpoints" / name)
            with registry.update() as state:
                state.agents[name] = dataclasses.replace(
                    state.agents["ckpt_000001"], name=name, path=f"checkpoints/{name}"
                )
        again = LeagueTrainer(
            _cfg(tiny_lm, url, "train.steps=2", "llm.max_loras=8"), run, resume=True
        )
        seats = (
            HERO,
            "ckpt_000001",
            "ckpt_000002",
            "ckpt_000003",
            "random_bot",
            "base_model",
            HERO,
        )
        seating = parse_seating(dict(zip(POWERS, seats, strict=True)))
        groups, results = again.play_group(3, seating, "AUSTRIA")
        played = {p.agent for p in results[0].participants}
        adapters = {n for n in played if n.startswith("ckpt_")}
        assert len(adapters) == 1  # the server had room for one opponent adapter
        assert all(s.records for s in groups[0])
        again.session.close()
        again.hero.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_shipped_vllm_config_trains_constrained_steps_through_llm_serve(
    tiny_lm, server, tmp_path
):
    # configs/diplomacy_vllm.yaml is the recipe that learned on the CPU; on a CPU against
    # `llm serve` it runs with the sets its header gives (plus a tiny game and group here).
    shipped = Path(__file__).resolve().parents[3] / "configs" / "diplomacy_vllm.yaml"
    recipe = load_config(DiplomacyConfig, shipped, [])
    assert (recipe.llm.backend, recipe.llm.mode, recipe.llm.device) == (
        "openai",
        "constrained",
        "cuda",
    )
    assert (recipe.train.lr, recipe.train.lr_schedule, recipe.train.kl_coef) == (
        0.002,
        "cosine",
        0.1,
    )
    assert recipe.llm.target_modules == "auto" and recipe.max_years == 3  # all seven projections
    cpu = [
        f"llm.base_model={tiny_lm}",
        "llm.device=cpu",
        "llm.dtype=float32",
        f"llm.endpoint={server}",
        "llm.lora_rank=4",
        "max_years=2",
        "train.steps=2",
        "train.group_size=3",
        "league.eval_every=100",
        "league.bootstrap=0",
    ]
    run = tmp_path / "run"
    rows_before = httpx.get(f"{server}/stats").json()["rows"]
    trainer = LeagueTrainer(load_config(DiplomacyConfig, shipped, cpu), run)
    before = trainer.hero.weights()
    trainer.run()
    steps = read_events(run / "events.ndjson", "diplomacy.train_step")
    assert [e["step"] for e in steps] == [1, 2]
    assert all(e["llm_completions"] > 0 for e in steps)
    # A group whose games tie has no advantage to learn from; at least one step updated.
    assert sum(e["records"] for e in steps) > 0
    after = trainer.hero.weights()
    assert any(not torch.equal(before[n], after[n]) for n in before)
    # Unit orders are legal by construction: only an adjustment line may name a site twice.
    assert all(e["llm_missing"] == 0 for e in steps)
    assert all(e["old_log_prob_gap"] < 1e-2 for e in steps)  # the server's masked log-probs
    assert httpx.get(f"{server}/stats").json()["rows"] > rows_before  # sampled on the server


def test_a_relative_adapter_path_is_sent_absolute(tiny_lm, server, tmp_path, monkeypatch):
    # The server runs in another working directory: "adapters/a" means nothing there, so the
    # client sends the path it names here, made absolute.
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend

    backend = HFBackend.from_pretrained(tiny_lm)
    backend.add_adapter("a")
    backend.save_adapter("a", tmp_path / "adapters" / "a")
    monkeypatch.chdir(tmp_path)
    assert Path.cwd() != Path(__file__).resolve().parents[3]  # the server's directory
    with OpenAIClient(server) as client:
        client.load_adapter("relative-a", "adapters/a")
        assert "relative-a" in client.list_adapters()
        client.unload_adapter("relative-a")
