"""The agent catalogue: every name parsed once into a typed spec, bad names in one error."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.agents.catalogue import (
    ACCEPTED,
    BOT_NAMES,
    HERO,
    AgentKind,
    AgentSpecError,
    parse_agents,
    seat_spec,
)
from leaguezero.diplomacy.game.bots import BOTS
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
