"""The hf backend and LLM seats on a tiny causal LM built in the test (no downloads).

Shows: different powers use different adapters; a GRPO step changes only the hero's adapter;
a checkpointed adapter goes through the league registry, loads back by name and plays.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.records import seat_game
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.llm.client import UnknownAdapterError
from leaguezero.diplomacy.llm.hero import LLMHero
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.prompt import build_prompt
from leaguezero.diplomacy.llm.tables import LLMTable
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings
from leaguezero.league.registry import LeagueRegistry

torch.set_num_threads(1)
GAME = DiplomacyConfig(max_years=1, games_dir=None)
NEW_TOKENS = 24


@pytest.fixture
def backend(tiny_lm) -> HFBackend:
    return HFBackend.from_pretrained(tiny_lm)


def perturb(backend: HFBackend, name: str, seed: int, std: float = 0.5) -> None:
    """Give an adapter non-zero B matrices (a fresh adapter equals the base model)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, param in backend.adapter_parameters(name).items():
            if "lora_B" in pname:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


class RecordingClient:
    """The real backend, remembering which adapter each prompt was sent with."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self.calls: list[list[tuple[str, str | None]]] = []

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed):
        self.calls.append(
            [
                (p.split("You are ")[1].split(".")[0], a)
                for p, a in zip(prompts, adapters, strict=True)
            ]
        )
        return self.backend.generate(prompts, adapters, max_new_tokens, temperature, seed)

    def load_adapter(self, name, path):
        self.backend.load_adapter(name, path)

    def unload_adapter(self, name):
        self.backend.unload_adapter(name)

    def list_adapters(self):
        return self.backend.list_adapters()


def test_adapters_differ_only_after_perturbing_and_rows_mix_in_one_batch(backend) -> None:
    backend.add_adapter("france-v0001")
    backend.add_adapter("england-v0001")
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "FRANCE", env.legal_orders("FRANCE"))
    names = ["france-v0001", "england-v0001", None]
    before = backend.generate([prompt] * 3, names, NEW_TOKENS, 0.0, seed=3)
    assert before[0].token_ids == before[1].token_ids == before[2].token_ids  # B = 0: the base
    perturb(backend, "england-v0001", seed=1)
    after = backend.generate([prompt] * 3, names, NEW_TOKENS, 0.0, seed=3)
    assert after[0].token_ids == before[0].token_ids  # France's adapter is untouched
    assert after[1].token_ids != after[0].token_ids or after[1].logprobs != after[0].logprobs
    # Log-probs of one fixed completion differ by adapter too, and match what sampling reported.
    scored = backend.logprobs([prompt] * 2, [after[0].token_ids] * 2, "france-v0001")
    other = backend.logprobs([prompt], [after[0].token_ids], "england-v0001")[0]
    assert torch.allclose(scored[0], torch.tensor(after[0].logprobs), atol=1e-4)
    assert not torch.allclose(scored[0], other, atol=1e-3)
    # A mixed batch gives each row what it gets alone.
    alone = backend.generate([prompt], ["england-v0001"], NEW_TOKENS, 0.0, seed=4)
    assert alone[0].token_ids == after[1].token_ids
    with pytest.raises(UnknownAdapterError, match="not loaded"):
        backend.generate([prompt], ["nobody-v0001"], 4, 1.0, seed=0)


def test_each_power_is_sampled_with_its_own_adapter_in_one_call_per_phase(backend) -> None:
    for name in ("a-v0001", "b-v0001"):
        backend.add_adapter(name)
    client = RecordingClient(backend)
    seating = {
        "AUSTRIA": "a-v0001",
        "ENGLAND": "b-v0001",
        "FRANCE": None,
        "GERMANY": "random_bot",
        "ITALY": "a-v0001",
        "RUSSIA": "greedy_bot",
        "TURKEY": "base_model",
    }
    table = LLMTable(
        client, parse_seating(seating), record_adapter="a-v0001", max_new_tokens=NEW_TOKENS, seed=5
    )
    result = run_rollout(GAME, 0, 0, table.seating, "AUSTRIA", resolver=table.resolver)
    assert result.phases >= 2 and client.calls
    first = dict(client.calls[0])
    assert first == {
        "AUSTRIA": "a-v0001",
        "ENGLAND": "b-v0001",
        "FRANCE": None,
        "ITALY": "a-v0001",
        "TURKEY": None,
    }
    assert len(client.calls) <= result.phases  # one batched call per phase, not per seat
    # Records are kept for the recorded adapter's seats only, with their sampled log-probs.
    assert {r.power for r in table.records} == {"AUSTRIA", "ITALY"}
    assert all(r.old_log_prob < 0 and r.payload.token_ids for r in table.records)
    stats = table.stats["AUSTRIA"]
    assert stats.completions == sum(r.power == "AUSTRIA" for r in table.records)
    assert result.invalid_orders["AUSTRIA"] == 0  # the parser already made them legal


def _snapshot(backend: HFBackend) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in backend.model.named_parameters()}


def test_a_grpo_step_changes_only_the_hero_adapter(backend) -> None:
    hero = LLMHero(backend, max_new_tokens=NEW_TOKENS)
    for name, seed in (("opp-v0001", 1), ("opp-v0002", 2)):
        backend.add_adapter(name)
        perturb(backend, name, seed)
    seating = {
        "AUSTRIA": "hero",
        "ENGLAND": "opp-v0001",
        "FRANCE": "opp-v0002",
        "GERMANY": None,
        "ITALY": "random_bot",
        "RUSSIA": "opp-v0001",
        "TURKEY": "chaos_bot",
    }
    games = []
    for game_idx in range(2):
        table = hero.table(parse_seating(seating), seed=game_idx)
        result = run_rollout(GAME, 0, game_idx, table.seating, "AUSTRIA", resolver=table.resolver)
        records = [r for r in table.records if r.power == "AUSTRIA"]
        assert records
        # Different scores so the group has a non-zero advantage.
        games.append(seat_game(result.scores["AUSTRIA"] + game_idx, records))
    before = _snapshot(backend)
    trainer = GRPOTrainer(hero, GRPOSettings(lr=1e-2))
    metrics = trainer.step([games])
    assert metrics["records"] > 0 and metrics["grad_norm"] > 0
    after = _snapshot(backend)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed, "the optimizer step changed nothing"
    assert all(f".{LLMHero.TRAIN_ADAPTER}." in n for n in changed), changed
    hero_params = {n for n in before if f".{LLMHero.TRAIN_ADAPTER}." in n}
    assert {n for n in hero_params if "lora_B" in n} <= changed  # B moves first from zero


def test_checkpoint_goes_through_the_registry_loads_back_by_name_and_plays(
    backend, tiny_lm, tmp_path
) -> None:
    hero = LLMHero(backend, max_new_tokens=NEW_TOKENS)
    perturb(backend, LLMHero.TRAIN_ADAPTER, seed=7)
    run_dir = tmp_path / "run"
    saved = hero.save(run_dir / "adapters" / "hero-v0001")
    assert (saved / "adapter_config.json").exists() and (saved / "leaguezero_adapter.json").exists()
    registry = LeagueRegistry.create(
        run_dir / "league.json", run_name="t", baselines={"base_model": 1000.0, "random_bot": 800.0}
    )
    with registry.update() as state:
        state.add_checkpoint("hero-v0001", path="adapters/hero-v0001", step=1)

    # A fresh process-like backend: load the checkpoint by its league name from the registry.
    other = HFBackend.from_pretrained(tiny_lm)
    info = registry.load().agents["hero-v0001"]
    other.load_adapter(info.name, registry.resolve(info.path))
    trained = backend.adapter_parameters(LLMHero.TRAIN_ADAPTER)
    loaded = other.adapter_parameters("hero-v0001")
    for name, param in trained.items():
        twin = loaded[name.replace(f".{LLMHero.TRAIN_ADAPTER}.", ".hero-v0001.")]
        assert torch.equal(param, twin)
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "GERMANY", env.legal_orders("GERMANY"))
    ours = backend.generate([prompt], [LLMHero.TRAIN_ADAPTER], NEW_TOKENS, 0.0, seed=0)[0]
    theirs = other.generate([prompt], ["hero-v0001"], NEW_TOKENS, 0.0, seed=0)[0]
    assert ours.token_ids == theirs.token_ids
    seating = dict.fromkeys(("AUSTRIA", "ENGLAND", "FRANCE"), "random_bot")
    seating |= {
        "GERMANY": "hero-v0001",
        "ITALY": "hero-v0001",
        "RUSSIA": None,
        "TURKEY": "greedy_bot",
    }
    table = LLMTable(other, parse_seating(seating), max_new_tokens=NEW_TOKENS, seed=2)
    result = run_rollout(GAME, 0, 0, table.seating, "GERMANY", resolver=table.resolver)
    assert result.power_agents["GERMANY"] == "hero-v0001" and table.stats["GERMANY"].completions
    # And the hero can be restored from the same folder.
    fresh = LLMHero(HFBackend.from_pretrained(tiny_lm))
    fresh.load(saved)
    restored = fresh.backend.adapter_parameters(LLMHero.TRAIN_ADAPTER)
    assert all(torch.equal(trained[n], restored[n]) for n in trained)
    with pytest.raises(FileExistsError, match="immutable"):
        backend.save_adapter(LLMHero.TRAIN_ADAPTER, saved)


def test_an_adapter_trained_on_another_prompt_layout_is_refused_in_one_line(
    backend, tmp_path
) -> None:
    import json

    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.diplomacy.llm.model.adapter_files import META_FILE
    from leaguezero.diplomacy.llm.orders.prompt import PROMPT_VERSION

    backend.add_adapter("hero")
    perturb(backend, "hero", seed=3)
    folder = backend.save_adapter("hero", tmp_path / "a")
    backend.load_adapter("same", folder)  # the current layout loads
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["prompt_version"] == PROMPT_VERSION
    meta["prompt_version"] = "dip_orders_v0"
    (folder / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(LLMError, match="trained on prompt 'dip_orders_v0'") as err:
        backend.load_adapter("old", folder)
    assert "\n" not in str(err.value)
    assert "old" not in backend.list_adapters()
