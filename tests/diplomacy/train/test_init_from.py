"""``diplomacy train --init-from`` (a new run from a saved agent, with its lineage) and the KL
warm-up (``train.kl_warmup_steps``), at tiny sizes: one-year games, groups of two, 1-2 steps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("diplomacy")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from leaguezero.common.config import load_config
from leaguezero.common.events import read_events
from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig, load_policy
from leaguezero.diplomacy.config import HERO_KINDS, DiplomacyConfig
from leaguezero.diplomacy.game import catalogue
from leaguezero.diplomacy.train import lineage
from leaguezero.diplomacy.train.grpo_settings import scheduled_kl_coef
from leaguezero.diplomacy.train.loop import TRAIN_STEP_EVENT, LeagueTrainer, TrainError

TINY = [
    "max_years=1",
    "train.group_size=2",
    "league.eval_games=1",
    "league.eval_every=1000",
    "league.bootstrap=0",
]


def _cfg(*extra: str) -> DiplomacyConfig:
    return load_config(DiplomacyConfig, None, [*TINY, *extra])


def _source(path: Path, seed: int = 7) -> dict[str, torch.Tensor]:
    """A policy checkpoint of a non-default shape (hidden 16, 1 layer); returns its weights."""
    policy = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=seed)
    policy.save(path)
    return policy.net.state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_kl_coef_schedule() -> None:
    assert [scheduled_kl_coef(0.2, s, 0) for s in (1, 2, 50)] == [0.2, 0.2, 0.2]
    assert [scheduled_kl_coef(0.2, s, 1) for s in (1, 2)] == [0.2, 0.2]
    assert [scheduled_kl_coef(0.3, s, 4) for s in (1, 2, 3, 4, 5, 100)] == pytest.approx(
        [0.0, 0.1, 0.2, 0.3, 0.3, 0.3]
    )
    with pytest.raises(ValueError):
        scheduled_kl_coef(0.1, 1, -1)


def test_init_from_checkpoint_then_run_folder_chains_lineage_and_warms_kl(tmp_path) -> None:
    weights = _source(tmp_path / "src.pt")
    run_b = tmp_path / "b"
    # Two steps with a KL warm-up over them: the coefficient is 0, then kl_coef.
    cfg = _cfg("train.steps=2", "train.kl_coef=0.1", "train.kl_warmup_steps=2")
    trainer = LeagueTrainer(cfg, run_b, init_from=tmp_path / "src.pt")
    # The network's shape is the checkpoint's (the config's model section is rewritten).
    assert (trainer.cfg.model.hidden, trainer.cfg.model.layers) == (16, 1)
    assert "hidden: 16" in (run_b / "config.yaml").read_text()
    # Before any update the hero, base_model and the KL reference are the source's weights.
    assert _same(trainer.hero.weights(), weights)
    assert _same(load_policy(run_b / "checkpoints" / "base_model.pt").net.state_dict(), weights)
    assert _same(trainer.trainer.reference.net.state_dict(), weights)
    trainer.run()
    steps = read_events(run_b / "events.ndjson", TRAIN_STEP_EVENT)
    assert [e["kl_coef"] for e in steps] == [0.0, 0.1]

    record = json.loads((run_b / "lineage.json").read_text())
    assert record["init_from"]["path"] == str((tmp_path / "src.pt").resolve())
    assert record["ancestors"] == []
    assert torch.load(run_b / "state.pt", weights_only=True)["lineage"] == record
    extra = torch.load(run_b / "checkpoints" / "ckpt_000001.pt", weights_only=True)["extra"]
    assert extra["step"] == 1
    [entry_b] = extra["lineage"]
    assert entry_b["run"] == str(run_b.resolve()) and entry_b["init_from"] == record["init_from"]

    # A second run starts from the first run's folder: its newest checkpoint, chain continued.
    run_c = tmp_path / "c"
    trainer_c = LeagueTrainer(_cfg("train.steps=1"), run_c, init_from=run_b)
    newest = load_policy(run_b / "checkpoints" / "ckpt_000001.pt").net.state_dict()
    assert _same(trainer_c.hero.weights(), newest)
    trainer_c.run()
    record_c = lineage.read_lineage(run_c)
    assert record_c["init_from"]["step"] == 1
    assert record_c["init_from"]["path"].endswith("ckpt_000001.pt")
    assert record_c["ancestors"] == [entry_b]
    chain = torch.load(run_c / "checkpoints" / "ckpt_000001.pt", weights_only=True)["extra"]
    assert [e["run"] for e in chain["lineage"]] == [str(run_b.resolve()), str(run_c.resolve())]
    # train-report shows where the run started.
    from typer.testing import CliRunner

    from leaguezero.cli import app

    shown = CliRunner().invoke(app, ["diplomacy", "train-report", str(run_c)])
    assert shown.exit_code == 0, shown.output
    assert "started from" in shown.stdout and "1 earlier run(s)" in shown.stdout


def test_pretrained_fails_cleanly_when_absent_and_works_when_shipped(tmp_path, monkeypatch):
    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path / "pretrained")
    with pytest.raises(TrainError, match="no pretrained Diplomacy agent ships in this version"):
        LeagueTrainer(_cfg(), tmp_path / "r1", init_from="pretrained")
    assert not (tmp_path / "r1").exists()  # refused before anything is written
    from typer.testing import CliRunner

    from leaguezero.cli import app

    runner = CliRunner()
    args = ["diplomacy", "train", "--out", str(tmp_path / "r2"), "--quiet"]
    result = runner.invoke(app, [*args, "--init-from", "pretrained"])
    assert result.exit_code != 0
    assert "no pretrained Diplomacy agent ships" in result.output
    assert "Traceback" not in result.output
    refused = runner.invoke(app, [*args, "--init-from", "pretrained", "--resume"])
    assert refused.exit_code != 0 and "--init-from starts a new run" in refused.output

    (tmp_path / "pretrained").mkdir()
    weights = _source(tmp_path / "pretrained" / catalogue.PRETRAINED_FILE, seed=3)
    trainer = LeagueTrainer(_cfg(), tmp_path / "r3", init_from="pretrained")
    assert _same(trainer.hero.weights(), weights)
    assert lineage.read_lineage(tmp_path / "r3")["init_from"]["given"] == "pretrained"
    trainer.session.close()
    with pytest.raises(TrainError, match="--init-from starts a new run"):
        LeagueTrainer(_cfg(), tmp_path / "r3", resume=True, init_from="pretrained")


def test_init_from_adapter_folder(tmp_path) -> None:
    pytest.importorskip("peft")
    from leaguezero.diplomacy.llm.runtime import backend_from_config
    from tests.diplomacy.tiny_lm import build_tiny_lm

    tiny = build_tiny_lm(tmp_path / "tiny_lm")
    llm = ["train.agent=llm", f"llm.base_model={tiny}", "llm.max_new_tokens=8", "llm.lora_rank=4"]
    cfg = _cfg(*llm, "train.steps=1", "train.kl_coef=0.1")
    backend = backend_from_config(cfg.llm)
    backend.add_adapter("src")
    with torch.no_grad():  # B = 0 at creation: give the adapter weights of its own
        for param in backend.adapter_parameters("src").values():
            param.normal_(0.0, 0.05)
    source = {
        k.replace(".src.", "."): v.clone() for k, v in backend.adapter_parameters("src").items()
    }
    folder = backend.save_adapter("src", tmp_path / "adapter")

    # An adapter of another rank fails with one line and leaves no run behind.
    with pytest.raises(TrainError, match=r"rank 4 \(llm.lora_rank is 8\)"):
        LeagueTrainer(_cfg(*llm, "llm.lora_rank=8"), tmp_path / "bad", init_from=folder)
    assert not (tmp_path / "bad").exists()

    run = tmp_path / "run"
    trainer = LeagueTrainer(cfg, run, init_from=folder)
    loaded = {k.replace(".hero_train.", "."): v for k, v in trainer.hero.weights().items()}
    assert _same(loaded, source)
    assert trainer.trainer.reference.adapter == "hero_init"  # the KL anchor is the init adapter
    trainer.run()
    record = lineage.read_lineage(run)
    assert record["init_from"]["agent"] == "llm" and record["init_from"]["sha256"]
    saved = json.loads((run / "checkpoints" / "ckpt_000001" / "lineage.json").read_text())
    assert saved["step"] == 1 and saved["lineage"][-1]["init_from"] == record["init_from"]


def test_pretrained_llm_names_the_shipped_adapter_and_base(tmp_path, monkeypatch) -> None:
    import typer

    from leaguezero.diplomacy.cli.common import load_diplomacy_config

    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path / "pretrained")
    llm = HERO_KINDS["llm"]
    with pytest.raises(lineage.LineageError, match="no pretrained LLM agent ships"):
        lineage.resolve_init_from("pretrained-llm", llm)
    shipped_base = ["train.agent=llm", "llm.base_model=pretrained-llm"]
    with pytest.raises(typer.Exit):  # one line on stderr (the CLI's fail)
        load_diplomacy_config(None, shipped_base)
    # a library caller of the trainer gets the alias too (and its one-line failure)
    no_llm = r"llm\.base_model=pretrained-llm: no pretrained LLM"
    with pytest.raises(catalogue.AgentSpecError, match=no_llm):
        LeagueTrainer(_cfg(*shipped_base), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(lineage.LineageError, match=r"train\.agent=policy starts from pretrained"):
        lineage.resolve_init_from("pretrained-llm", HERO_KINDS["policy"])
    base, adapter = (
        tmp_path / "pretrained" / "llm" / "base",
        tmp_path / "pretrained" / "llm" / "adapter",
    )
    base.mkdir(parents=True)
    adapter.mkdir()
    (base / "config.json").write_text("{}")
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"x")
    source = lineage.resolve_init_from("pretrained-llm", llm)
    assert source.path == adapter.resolve() and source.record["init_from"]["sha256"]
    assert load_diplomacy_config(None, shipped_base).llm.base_model == str(base)


def test_pretrained_smol_names_the_shipped_smollm2_adapter(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(catalogue, "PRETRAINED_DIR", tmp_path / "pretrained")
    llm = HERO_KINDS["llm"]
    with pytest.raises(lineage.LineageError, match="no SmolLM2 adapter ships"):
        lineage.resolve_init_from("pretrained-smol", llm)
    with pytest.raises(lineage.LineageError, match=r"train\.agent=policy starts from pretrained"):
        lineage.resolve_init_from("pretrained-smol", HERO_KINDS["policy"])
    adapter = tmp_path / "pretrained" / "llm_smol" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"x")
    source = lineage.resolve_init_from("pretrained-smol", llm)
    assert source.path == adapter.resolve() and source.record["init_from"]["sha256"]
