"""Issue 14, item 3: every command builds the identical search from the same config.

Each command runs for real up to the moment it builds a checkpoint agent
(:meth:`ModelAgent.from_settings`, the one place that happens); the test records the settings
it passes and stops the command there. With one budget for every command the settings must be
equal, and carry the config's ``margin_utility``, ``normalize_q``, ``c_puct``, margin scale and
budgets — for the PUCT and the turn search alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from leaguezero.az.checkpoint import save_checkpoint
from leaguezero.common.config import load_config
from leaguezero.league.types import AgentInfo, AgentKind
from leaguezero.yatzy.agents.model import ModelAgent
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.schema import build_network, checkpoint_schema
from leaguezero.yatzy.search.settings import SearchSettings

SIMS = 3


class _Built(Exception):
    """Raised where a command would build its agent (the settings are recorded by then)."""


def _config(tmp_path: Path, kind: str) -> tuple[Path, YatzyConfig]:
    data = {
        "search": {"kind": kind},
        "mcts": {"c_puct": 2.5, "normalize_q": False, "margin_utility": 0.3,
                 "budget_reroll": SIMS, "budget_mark": SIMS, "max_inflight_per_game": 2},
        "train": {"margin_scale": 40.0},
        "model": {"hidden": 8, "blocks": 1},
        "gate": {"sims": SIMS},
        "oracle_eval": {"sims": SIMS},
        "league": {"eval_sims": SIMS, "opponent_sims": SIMS},
    }  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, load_config(YatzyConfig, path, [])


def _checkpoint(cfg: YatzyConfig, path: Path) -> Path:
    net = build_network(cfg, 0)
    save_checkpoint(path, net, kind=net.kind, kwargs=net.kwargs(),
                    schema=checkpoint_schema(cfg.search.kind))  # fmt: skip
    return path


@pytest.fixture
def recorded(monkeypatch):
    seen: list[tuple[str, SearchSettings]] = []
    where = {"now": ""}

    def record(path, settings, **_kwargs):
        seen.append((where["now"], settings))
        raise _Built

    monkeypatch.setattr(ModelAgent, "from_settings", staticmethod(record))
    return seen, where


def _cli(where: dict, name: str, *args: str) -> None:
    from leaguezero.yatzy.cli.app import app

    where["now"] = name
    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, _Built), (name, result.output, result.exception)


@pytest.mark.parametrize("kind", ["puct", "turn"])
def test_every_command_builds_the_same_search_settings(tmp_path, monkeypatch, recorded, kind):
    seen, where = recorded
    cfg_path, cfg = _config(tmp_path, kind)
    ckpt = str(_checkpoint(cfg, tmp_path / "net.pt"))
    monkeypatch.setattr("leaguezero.yatzy.cli.run.load_oracle_with_notice", lambda t: object())
    monkeypatch.setattr("leaguezero.yatzy.agents.oracle.OracleAgent", lambda **kw: object())
    c = ["--config", str(cfg_path)]

    _cli(where, "yz gate", "gate", "--best", ckpt, "--cand", ckpt, *c,
         "--seed-sets", str(tmp_path / "seeds"))  # fmt: skip
    _cli(where, "yz oracle-eval", "oracle-eval", "--best", ckpt, *c)
    _cli(where, "yz match", "match", "--a", f"model:{ckpt}", "--b", "greedy", *c)
    _cli(where, "yz play", "play", "--agent", ckpt, "--sims", str(SIMS), "--no-oracle", *c)

    # yz run: the loop's gate and oracle-eval phases (self-play and training marked done).
    from leaguezero.yatzy.train.loop import RunDir, init_run, run_iteration

    run = RunDir(tmp_path / "run")
    init_run(cfg, run)
    settings = SearchSettings.from_config(cfg)  # built once, as `yz run` does
    _checkpoint(cfg, run.candidate(1))
    for phases, partial, name in (
        (["selfplay", "train"], {}, "yz run gate"),
        (["selfplay", "train", "gate"], {"gate": {"promote": False}}, "yz run oracle-eval"),
    ):
        run.write_state(0, phases, partial=partial)
        where["now"] = name
        with pytest.raises(_Built):
            run_iteration(cfg, run, 1, lambda *a: None, oracle=object(), settings=settings)

    # The league: its opponents and the evaluator's tournament (run in another process from
    # the kwargs the run hands its evaluator).
    from leaguezero.yatzy.train.league.agents import yatzy_tournament
    from leaguezero.yatzy.train.league.run import LeagueRun

    league = LeagueRun(cfg, run, settings=settings)
    handed = {"tournament_kwargs": league.evaluator.tournament_kwargs}
    info = AgentInfo("ckpt_1", AgentKind.CHECKPOINT, 1000.0, path=ckpt)
    where["now"] = "league opponent"
    with pytest.raises(_Built):
        league.opponent_agent(info, seed=0)
    where["now"] = "league evaluator"
    with pytest.raises(_Built):
        yatzy_tournament(info, [info], seed=0, **handed["tournament_kwargs"])

    expected = SearchSettings.from_config(cfg).evaluation(SIMS)
    assert (expected.kind, expected.c_puct, expected.normalize_q) == (kind, 2.5, False)
    assert (expected.margin_utility, expected.margin_scale) == (0.3, 40.0)
    assert (expected.budget_reroll, expected.budget_mark, expected.raw_policy) == (3, 3, False)
    assert expected.dirichlet_epsilon == 0.0 and expected.temperature == 0.0
    names = [name for name, _ in seen]
    assert names == ["yz gate", "yz oracle-eval", "yz match", "yz play", "yz run gate",
                     "yz run oracle-eval", "league opponent", "league evaluator"]  # fmt: skip
    different = [f"{name}: {s}" for name, s in seen if s != expected]
    assert not different, f"expected {expected}\n" + "\n".join(different)


def test_self_play_search_is_the_config_mcts_section():
    cfg = YatzyConfig()
    settings = SearchSettings.from_config(cfg)
    assert {k: getattr(settings, k) for k in type(cfg.mcts).model_fields} == cfg.mcts.model_dump()
    assert settings.depth == cfg.search.depth == 1
    assert settings.margin_scale == cfg.train.margin_scale
    assert settings.turn_temperature == cfg.search.temperature
    # No config: the defaults a bare model:PATH agent used before the settings object.
    assert SearchSettings() == SearchSettings.from_config(YatzyConfig())


def test_model_options_override_settings():
    base = SearchSettings(c_puct=2.0)
    out = base.with_options({"sims": "6", "normalize_q": "false", "margin_utility": 0.5})
    assert (out.budget_reroll, out.budget_mark, out.c_puct) == (6, 6, 2.0)
    assert out.normalize_q is False and out.margin_utility == 0.5
    assert base.with_options({"sims": 0}).raw_policy
    assert SearchSettings.from_dict(out.to_dict()) == out
    with pytest.raises(ValueError, match="unknown model option"):
        base.with_options({"normalise_q": "false"})
    with pytest.raises(ValueError, match="depth must be 1 or 2"):
        base.with_options({"depth": "x"})
    with pytest.raises(ValueError, match="not a boolean"):
        base.with_options({"normalize_q": "maybe"})
