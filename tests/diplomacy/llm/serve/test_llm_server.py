"""`leaguezero llm serve` as a real process on loopback, driven by the OpenAI-compatible client.

Shows: two adapters loaded at runtime play in one real game through HTTP; log-probs and token
ids come back; adapter slots evict the least recently used; a remote-sampled hero publishes
immutable versions and retires the old one; errors are one clear line.
"""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
pytest.importorskip("httpx")

import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.llm.client import LLMError, UnknownAdapterError
from leaguezero.diplomacy.llm.hero import LLMHero
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.orders.prompt import build_prompt
from leaguezero.diplomacy.llm.remote.adapters import AdapterSlots, fit_seating, versioned_name
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.tables import LLMTable
from tests.diplomacy.tiny_lm import start_llm_server

torch.set_num_threads(1)
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def server(tiny_lm):
    proc, url = start_llm_server(tiny_lm)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def client(server):
    with OpenAIClient(server) as c:
        yield c
        for name in c.list_adapters():
            c.unload_adapter(name)


def test_two_adapters_play_one_game_over_http(client, adapter_dirs, tiny_lm) -> None:
    assert client.base_model == "tiny" and client.list_adapters() == []
    for name, folder in adapter_dirs.items():
        client.load_adapter(name, folder)
    assert sorted(client.list_adapters()) == sorted(adapter_dirs)
    seating = {
        "AUSTRIA": "austria-v0001",
        "ENGLAND": "england-v0001",
        "FRANCE": "random_bot",
        "GERMANY": "austria-v0001",
        "ITALY": "greedy_bot",
        "RUSSIA": "england-v0001",
        "TURKEY": None,
    }
    table = LLMTable(
        client,
        parse_seating(seating),
        record_adapter="austria-v0001",
        max_new_tokens=NEW_TOKENS,
        seed=11,
    )
    cfg = DiplomacyConfig(max_years=1, games_dir=None)
    result = run_rollout(cfg, 0, 0, table.seating, "AUSTRIA", resolver=table.resolver)
    assert result.phases >= 2 and table.calls >= 1
    assert table.stats["ENGLAND"].completions >= 1 and table.stats["TURKEY"].completions >= 1
    assert {r.power for r in table.records} == {"AUSTRIA", "GERMANY"}
    for record in table.records:
        assert record.payload.token_ids and record.old_log_prob < 0

    # Same prompt, same seed: the two adapters answer differently; the server's log-probs are
    # those the hf backend computes for the returned tokens.
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "AUSTRIA", env.legal_orders("AUSTRIA"))
    a, b = client.generate([prompt, prompt], list(adapter_dirs), NEW_TOKENS, 0.0, seed=1)
    assert a.token_ids != b.token_ids or a.logprobs != b.logprobs
    assert len(a.token_ids) == len(a.logprobs) > 0
    local = HFBackend.from_pretrained(tiny_lm)
    local.load_adapter("austria-v0001", adapter_dirs["austria-v0001"])
    rescored = local.logprobs([prompt], [a.token_ids], "austria-v0001")[0]
    assert torch.allclose(rescored, torch.tensor(a.logprobs), atol=1e-4)


def test_errors_are_clear_and_slots_evict_the_least_recently_used(client, adapter_dirs) -> None:
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "FRANCE", env.legal_orders("FRANCE"))
    with pytest.raises(UnknownAdapterError, match="does not exist"):
        client.generate([prompt], ["ghost-v0001"], 4, 1.0, seed=0)
    with pytest.raises(LLMError, match="adapter_config"):
        client.load_adapter("ghost-v0001", "/nonexistent")
    slots = AdapterSlots(client, max_loras=1)
    slots.ensure({"austria-v0001": adapter_dirs["austria-v0001"]})
    evicted = slots.ensure({"england-v0001": adapter_dirs["england-v0001"]})
    assert evicted == ["austria-v0001"] and client.list_adapters() == ["england-v0001"]
    with pytest.raises(LLMError, match="max_loras"):
        slots.ensure(adapter_dirs)


def test_remote_hero_publishes_immutable_versions_and_retires_old_ones(
    client, tiny_lm, tmp_path
) -> None:
    backend = HFBackend.from_pretrained(tiny_lm, model_name="tiny")
    slots = AdapterSlots(client, max_loras=2)
    hero = LLMHero(
        backend, sampler=client, adapters_dir=tmp_path, slots=slots, max_new_tokens=NEW_TOKENS
    )
    actor = hero.actor(seed=0)
    assert hero.live_adapter == versioned_name("hero", 1) and client.list_adapters() == [
        "hero-v0001"
    ]
    env = DiplomacyEnv(max_years=1)
    orders = actor.get_orders(env, "FRANCE")
    assert len(orders) == 3 and actor.records[0].power == "FRANCE"
    # The recorded old log-prob is what the trainer's backend computes for the same tokens.
    assert hero.log_prob(actor.records).item() == pytest.approx(
        actor.records[0].old_log_prob, abs=1e-3
    )
    hero.actor(seed=1)
    assert hero.live_adapter == "hero-v0001"  # weights unchanged: no new version
    optimizer = torch.optim.SGD(hero.trainable_parameters(), lr=0.5)
    (-hero.log_prob(actor.records).sum()).backward()
    optimizer.step()
    hero.actor(seed=2)
    assert hero.live_adapter == "hero-v0002" and client.list_adapters() == ["hero-v0002"]
    assert (tmp_path / "hero-v0001").is_dir() and (tmp_path / "hero-v0002").is_dir()


def test_fit_seating_falls_back_to_cluster_sampling() -> None:
    import random

    opponents = ["o1-v0001", "o2-v0001", "o3-v0001", "random_bot", "o4-v0001", "o5-v0001"]
    adapter = lambda name: name.endswith("-v0001") or name == "hero-v0009"  # noqa: E731
    seats = fit_seating(
        "hero-v0009", opponents, max_loras=8, uses_slot=adapter, rng=random.Random(0), hero_seat=2
    )
    assert seats == [
        "o1-v0001",
        "o2-v0001",
        "hero-v0009",
        "o3-v0001",
        "random_bot",
        "o4-v0001",
        "o5-v0001",
    ]
    seats = fit_seating(
        "hero-v0009", opponents, max_loras=3, uses_slot=adapter, rng=random.Random(0), hero_seat=0
    )
    assert seats == [
        "hero-v0009",
        "o1-v0001",
        "o1-v0001",
        "o1-v0001",
        "o2-v0001",
        "o2-v0001",
        "o2-v0001",
    ]
    assert len({s for s in seats if adapter(s)}) <= 3
