"""The Yatzy agent catalogue: one parser, one builder, one error listing what is accepted."""

from __future__ import annotations

import pytest

from leaguezero.league.types import AgentInfo, AgentKind
from leaguezero.yatzy.agents.base import GreedyAgent, RandomAgent
from leaguezero.yatzy.agents.registry import (
    ACCEPTED,
    PRETRAINED_PATH,
    AgentSpecError,
    checkpoint_name,
    parse_agent_spec,
)
from leaguezero.yatzy.cli.common import se_text
from leaguezero.yatzy.train.league.agents import build_league_agent


def test_names_parse_into_typed_specs(tmp_path):
    assert parse_agent_spec("greedy").path is None
    spec = parse_agent_spec("pretrained?depth=2")
    assert (spec.path, spec.query) == (PRETRAINED_PATH, "depth=2")
    # pretrained plays two turns deep unless told otherwise (measured stronger;
    # docs/guides/alphazero.md)
    assert parse_agent_spec("pretrained").query == "depth=2"
    assert parse_agent_spec("pretrained?depth=1").query == "depth=1"
    assert parse_agent_spec("pretrained?device=cpu").query == "depth=2&device=cpu"
    ckpt = tmp_path / "net.pt"
    ckpt.write_bytes(b"")
    assert parse_agent_spec(f"model:{ckpt}?sims=4").path == ckpt
    assert parse_agent_spec(str(ckpt), bare_path=True).is_checkpoint
    with pytest.raises(AgentSpecError, match="unknown agent"):
        parse_agent_spec(str(ckpt))  # a bare path only where a command asks for a checkpoint


def test_a_checkpoint_is_told_by_its_spelling_alone(tmp_path):
    # the web app decides from the name, never from which files exist
    assert checkpoint_name("model:runs/a/best.pt?sims=8") == "model:runs/a/best.pt?sims=8"
    assert checkpoint_name("runs/a/best.pt?depth=1") == "model:runs/a/best.pt?depth=1"
    assert checkpoint_name(str(tmp_path / "missing.pt")) == f"model:{tmp_path / 'missing.pt'}"
    for name in ("greedy", "pretrained", "pretrained?depth=1", "runs/a/best", "setup.py"):
        assert checkpoint_name(name) is None


@pytest.mark.parametrize("bad", ["grumpy", "model:", "pretrained2", ""])
def test_bad_names_list_what_is_accepted(bad):
    with pytest.raises(AgentSpecError) as err:
        parse_agent_spec(bad)
    assert ACCEPTED in str(err.value)


def test_league_bots_come_from_the_catalogue():
    def bot(name: str) -> AgentInfo:
        return AgentInfo(name=name, type=AgentKind.BASELINE, elo=1000.0)

    assert isinstance(build_league_agent(bot("random")), RandomAgent)
    assert isinstance(build_league_agent(bot("greedy")), GreedyAgent)
    with pytest.raises(ValueError, match=r"fix league\.json"):
        build_league_agent(bot("grumpy"))


def test_a_zero_standard_error_says_too_few_games():
    assert se_text(0.0, 4) == "? (too few games)"
    assert se_text(float("nan"), 2) == "? (too few games)"
    assert se_text(0.0123, 4) == "0.0123"
