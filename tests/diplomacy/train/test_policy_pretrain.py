"""Imitation pretraining of the policy network (``diplomacy pretrain-policy``), tiny sizes."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("diplomacy")

from typer.testing import CliRunner

from leaguezero.cli import app
from leaguezero.diplomacy.agents.policy import load_policy
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bots import make_bot
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.phase import validate_orders
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.train import lineage
from leaguezero.diplomacy.train.imitation import (
    DiplomacyPolicy,
    PolicyConfig,
    PolicyImitationSettings,
    collect_corpus,
    evaluate,
    game_plan,
    train_imitation,
)

SEATS = ("dumb_bot", "random_bot")


def _teacher_orders(game: int, years: int) -> dict[tuple[str, str], tuple[dict, list[str]]]:
    """Replay game ``game`` as collect_corpus plays it: {(phase, power): (legal, raw orders)}
    of the dumb_bot seats."""
    seats, bot_seed = game_plan(0, game, SEATS)
    rng = random.Random(bot_seed)
    bots = {p: make_bot(seats[p], seed=rng.getrandbits(32)) for p in POWERS}
    env = DiplomacyEnv(max_years=years)
    seen = {}
    while not env.done:
        for power in POWERS:
            legal = env.legal_orders(power)
            if not legal:
                continue
            raw = bots[power].get_orders(env, power)
            if seats[power] == "dumb_bot":
                seen[(env.phase, power)] = (legal, list(raw))
            env.set_orders(power, validate_orders(env, power, raw, legal)[0])
        env.process()
    return seen


def test_corpus_holds_only_legal_teacher_choices() -> None:
    kinds = set()
    for game in range(2):
        corpus = collect_corpus([game], seat_bots=SEATS, max_years=1, keep_orders=True)
        teacher = _teacher_orders(game, years=1)
        assert corpus.records and corpus.skipped == 0
        picked: dict[tuple[str, str], list[str]] = {}
        for record, options in zip(corpus.records, corpus.orders or [], strict=True):
            legal, raw = teacher[(record.phase, record.power)]
            legal_set = {o for opts in legal.values() for o in opts}
            assert set(options) <= legal_set  # candidates are legal orders
            assert len(options) == record.payload.cand.shape[0] > 1
            order = options[record.payload.chosen]
            assert order in raw or (order == "WAIVE" and record.phase.endswith("A"))
            picked.setdefault((record.phase, record.power), []).append(order)
            kinds.add(record.phase[-1])
        for (phase, _), orders in picked.items():  # at most one order per unit or site
            real = [o for o in orders if o != "WAIVE"]
            assert len({o.split()[1][:3] for o in real}) == len(real), phase
    assert {"M", "A"} <= kinds  # movement and adjustment choices


@pytest.fixture(scope="module")
def corpus():
    return collect_corpus(range(3), seat_bots=SEATS, max_years=1)


def test_training_overfits_a_small_batch_and_beats_chance(corpus) -> None:
    records = corpus.records[:48]
    policy = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=0)
    settings = PolicyImitationSettings(epochs=25, batch=48, lr=1e-2, hidden=16, layers=1)
    before = evaluate(policy, records)
    curve = train_imitation(policy, records, [], settings, log=lambda _: None)
    after = evaluate(policy, records)
    assert curve[-1]["train_loss"] < 0.7 * curve[0]["train_loss"]
    assert after.loss < 0.7 * before.loss
    chance = sum(1 / r.payload.cand.shape[0] for r in records) / len(records)
    assert after.accuracy > chance + 0.2


def test_cli_pretrains_a_checkpoint_that_plays_and_carries_its_lineage(tmp_path) -> None:
    out = tmp_path / "pre.pt"
    args = ["diplomacy", "pretrain-policy", "--out", str(out), "--games", "2"]
    args += ["--max-years", "1", "--seats", "dumb_bot,random_bot", "--epochs", "1"]
    args += ["--hidden", "16", "--layers", "1", "--val-games", "1", "--seed", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert 0.0 <= summary["val_accuracy"] <= 1.0
    report = json.loads((tmp_path / "pre.json").read_text())
    assert report["teacher"] == "dumb_bot" and report["corpus"]["train"]["choices"] > 0
    assert report["command"].startswith("leaguezero diplomacy pretrain-policy --out")

    policy = load_policy(out, seed=1)
    assert policy.config == PolicyConfig(hidden=16, layers=1)
    cfg = DiplomacyConfig(max_years=2, games_dir=None, run={"seed": 5})
    played = run_rollout(
        cfg, 0, 0, dict.fromkeys(POWERS, "net"), "FRANCE", resolver=lambda _: policy
    )
    assert sum(played.invalid_orders.values()) == 0
    assert sum(played.missing_orders.values()) == 0

    source = lineage.resolve_init_from(str(out), DiplomacyConfig().train.hero)
    (entry,) = source.record["ancestors"]
    assert entry["made_by"] == "pretrain-policy" and entry["teacher"] == "dumb_bot"

    again = CliRunner().invoke(app, args)  # an existing --out is refused
    assert again.exit_code == 2 and "exists" in again.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--teacher", "nobot"], "unknown bot(s) nobot"),
        (["--seats", "greedy_bot,ghost"], "unknown bot(s) ghost"),
        (["--games", "0"], "--games must be at least 1"),
        (["--seats", "greedy_bot"], "the corpus would be empty"),
    ],
)
def test_bad_arguments_fail_in_one_line(tmp_path, extra, needle) -> None:
    args = ["diplomacy", "pretrain-policy", "--out", str(tmp_path / "x.pt"), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.output
    assert not (tmp_path / "x.pt").exists()
