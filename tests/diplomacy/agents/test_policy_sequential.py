"""Orders decoded in sequence and the value head (issue 53): exact joint log-probs, conditioning
that matters, teacher-forced imitation, value learning and schema-2 checkpoints."""

from __future__ import annotations

import io
import itertools

import pytest
import torch

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.agents.actor import ChoicePayload, PhaseBoard
from leaguezero.diplomacy.agents.policy import (
    CheckpointError,
    DiplomacyPolicy,
    PolicyConfig,
    load_policy,
)
from leaguezero.diplomacy.agents.value import calibration
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.features import board_features, encode_orders
from leaguezero.diplomacy.game.records import ActionRecord, PlayedGame
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings
from leaguezero.diplomacy.train.imitation import Corpus, _record_phase, train_imitation
from leaguezero.diplomacy.train.imitation_settings import PolicyImitationSettings
from leaguezero.diplomacy.train.value_loss import ValueGRPOTrainer, value_loss

torch.set_num_threads(1)
SEQUENTIAL = PolicyConfig(hidden=16, layers=1, decoder="sequential", value_head=True)


def _perturbed(config: PolicyConfig, seed: int) -> DiplomacyPolicy:
    policy = DiplomacyPolicy(config, seed=seed)
    with torch.no_grad():  # far from uniform, so the checks are not trivially log(1/K)
        gen = torch.Generator().manual_seed(seed)
        for p in policy.net.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return policy


def _self_play(policy: DiplomacyPolicy, years: int, seed: int):
    actors = []

    def resolve(_name):
        actors.append(policy.actor(seed=seed + len(actors)))
        return actors[-1]

    cfg = DiplomacyConfig(max_years=years, games_dir=None, run={"seed": seed})
    result = run_rollout(cfg, 0, 0, dict.fromkeys(POWERS, "net"), "FRANCE", resolver=resolve)
    return result, [r for a in actors for r in a.records]


def test_sequential_play_is_legal_and_log_prob_recomputes_sampling() -> None:
    fresh = DiplomacyPolicy(SEQUENTIAL, seed=1)  # near uniform: it grows, so it builds
    result, records = _self_play(fresh, years=3, seed=2)
    assert sum(result.invalid_orders.values()) == 0 and sum(result.missing_orders.values()) == 0
    assert {r.phase[-1] for r in records} >= {"M", "A"}
    policy = _perturbed(SEQUENTIAL, seed=1)
    result, records = _self_play(policy, years=2, seed=2)
    assert sum(result.invalid_orders.values()) == 0 and sum(result.missing_orders.values()) == 0
    new = policy.log_prob(records)
    old = torch.tensor([r.old_log_prob for r in records])
    assert torch.allclose(new, old, atol=1e-4)
    # Later units of a phase carry the earlier orders as their condition.
    assert any(r.payload.prior is not None and len(r.payload.prior) >= 2 for r in records)
    new.sum().backward()
    assert all(p.grad is not None for p in policy.net.conditioner.parameters())


def _joint_records(env: DiplomacyEnv, power: str, joint: tuple[str, ...]) -> list[ActionRecord]:
    corpus = Corpus(records=[])
    _record_phase(corpus, env, power, env.legal_orders(power), list(joint))
    return corpus.records


def test_joint_orders_form_one_distribution_whose_log_prob_is_the_sum_of_steps() -> None:
    """Every joint order of Austria's three units, teacher-forced: the exp of the summed step
    log-probs adds up to 1 over all joints (a proper autoregressive distribution), and a
    sampled joint's summed record log-probs equal that joint's."""
    policy = _perturbed(SEQUENTIAL, seed=3)
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("AUSTRIA")
    joints = list(itertools.product(*legal.values()))
    assert len(joints) > 100
    per_joint = [_joint_records(env, "AUSTRIA", j) for j in joints]
    flat = [r for rs in per_joint for r in rs]
    with torch.no_grad():
        logp = policy.log_prob(flat)
    sums, start = [], 0
    for rs in per_joint:
        sums.append(logp[start : start + len(rs)].sum())
        start += len(rs)
    joint_logp = torch.stack(sums)
    assert torch.logsumexp(joint_logp.double(), 0).item() == pytest.approx(0.0, abs=1e-4)

    actor = policy.actor(seed=9)
    orders = actor.get_orders(env, "AUSTRIA")
    sampled = sum(r.old_log_prob for r in actor.records)
    index = joints.index(tuple(sorted(orders, key=lambda o: list(legal).index(o.split()[1]))))
    assert sampled == pytest.approx(float(joint_logp[index]), abs=1e-4)


def _unit_record(board: PhaseBoard, options: list[str], prior: list[str]) -> ActionRecord:
    payload = ChoicePayload(
        board,
        torch.from_numpy(encode_orders(options)),
        0,
        1.0,
        torch.from_numpy(encode_orders(prior)),
    )
    return ActionRecord("FRANCE", "S1901M", 0.0, payload)


def test_changing_an_earlier_order_changes_the_next_units_distribution() -> None:
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("FRANCE")
    board = PhaseBoard(torch.from_numpy(board_features(env, "FRANCE")))
    opts = legal["PAR"]
    for config, differs in ((SEQUENTIAL, True), (PolicyConfig(hidden=16, layers=1), False)):
        policy = _perturbed(config, seed=4)
        a = _unit_record(board, opts, ["F BRE - MAO", "A MAR - BUR"])
        b = _unit_record(board, opts, ["F BRE - MAO", "A MAR - PIE"])
        with torch.no_grad():
            probs, _ = policy.candidate_log_probs([a, b])
        gap = float((probs[0].exp() - probs[1].exp()).abs().max())
        assert (gap > 1e-3) == differs, (config.decoder, gap)


def _support_corpus(n: int) -> list[ActionRecord]:
    """France's opening, half the time ``MAR - BUR`` with ``PAR S MAR - BUR``, half the time
    ``MAR - PIE`` with ``PAR - BUR``: PAR's order is a coin flip unless MAR's is known."""
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("FRANCE")
    corpus = Corpus(records=[])
    for k in range(n):
        if k % 2:
            raw = ["F BRE - MAO", "A MAR - BUR", "A PAR S A MAR - BUR"]
        else:
            raw = ["F BRE - MAO", "A MAR - PIE", "A PAR - BUR"]
        _record_phase(corpus, env, "FRANCE", legal, raw)
    assert corpus.skipped == 0
    return corpus.records


def test_teacher_forcing_learns_a_support_that_names_its_move() -> None:
    records = _support_corpus(32)
    par = [r for r in records if int(r.payload.cand[0, 1]) == int(encode_orders(["A PAR H"])[0, 1])]
    assert len(par) == 32
    settings = PolicyImitationSettings(epochs=40, batch=32, lr=1e-2, hidden=16, layers=1)
    losses = {}
    for decoder in ("independent", "sequential"):
        policy = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1, decoder=decoder), seed=0)
        curve = train_imitation(policy, records, par, settings, log=lambda _: None)
        assert curve[-1]["train_loss"] < 0.6 * curve[0]["train_loss"]
        losses[decoder] = curve[-1]["val_loss"]
        if decoder == "sequential":
            trained = policy
    assert losses["independent"] > 0.6  # ln 2: PAR's marginal is a coin flip
    assert losses["sequential"] < 0.15
    env = DiplomacyEnv(max_years=1)
    agree = 0
    for seed in range(40):
        orders = trained.actor(seed=seed).get_orders(env, "FRANCE")
        if "A MAR - BUR" in orders:
            agree += "A PAR S A MAR - BUR" in orders
        else:
            agree += "A PAR - BUR" in orders
    assert agree >= 36


def test_the_value_head_learns_a_known_target() -> None:
    env = DiplomacyEnv(max_years=1)
    boards = [
        PhaseBoard(torch.from_numpy(board_features(env, p)), 0.04 + 0.03 * i)
        for i, p in enumerate(POWERS)
    ]
    policy = DiplomacyPolicy(SEQUENTIAL, seed=0)
    records = [_unit_record(b, ["A PAR H", "A PAR - BUR"], []) for b in boards]
    opt = torch.optim.Adam(policy.trainable_parameters(), lr=1e-2)
    first = float(value_loss(policy, records))
    for _ in range(300):
        opt.zero_grad()
        value_loss(policy, records).backward()
        opt.step()
    target = [b.share for b in boards]
    with torch.no_grad():
        report = calibration(policy.values(boards).tolist(), target)
    assert report["mse"] < 1e-4 < first
    assert report["r2"] > 0.95


def test_calibration_reports_bins_and_the_constant_baseline() -> None:
    report = calibration([0.1, 0.1, 0.9, 0.9], [0.0, 0.2, 1.0, 0.8], bins=2)
    assert report["mse"] == pytest.approx(0.01)
    assert report["baseline_mse"] == pytest.approx(0.17)
    assert [(b["n"], b["predicted"], b["realised"]) for b in report["bins"]] == [
        (2, 0.1, 0.1),
        (2, 0.9, 0.9),
    ]


def test_grpo_adds_the_value_loss_to_its_update() -> None:
    policy = _perturbed(SEQUENTIAL, seed=5)
    _, records = _self_play(policy, years=1, seed=6)
    scores = {p: float(i + 1) for i, p in enumerate(POWERS)}
    games = [
        PlayedGame(scores, 0, records, seat=p) for p in POWERS if any(r.power == p for r in records)
    ]
    shares = {p: s / sum(scores.values()) for p, s in scores.items()}
    for coef, moves in ((0.0, False), (1.0, True)):
        trained = policy.copy()
        trainer = ValueGRPOTrainer(trained, GRPOSettings(value_coef=coef, lr=1e-2, epochs=1))
        before = [p.detach().clone() for p in trained.net.value_head.parameters()]
        metrics = [trainer.step([games], seed=s) for s in range(30)]
        after = list(trained.net.value_head.parameters())
        changed = any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert changed == moves
        assert metrics[0]["value_boards"] > 0 and "value_baseline_mse" in metrics[0]
        if moves:
            assert metrics[-1]["value_mse"] < 0.3 * metrics[0]["value_mse"]
    assert len(shares) == 7


def test_schema_2_checkpoints_round_trip_and_foreign_ones_are_refused(tmp_path) -> None:
    policy = _perturbed(SEQUENTIAL, seed=7)
    path = policy.save(tmp_path / "seq.pt")
    loaded = load_policy(path)
    assert loaded.config == SEQUENTIAL
    _, records = _self_play(policy, years=1, seed=8)
    assert torch.allclose(loaded.log_prob(records), policy.log_prob(records))
    env = DiplomacyEnv(max_years=1)
    assert torch.allclose(
        loaded.values([records[0].payload.board]), policy.values([records[0].payload.board])
    )
    assert loaded.actor(seed=3).get_orders(env, "RUSSIA") == policy.actor(seed=3).get_orders(
        env, "RUSSIA"
    )

    data = torch.load(path, weights_only=True)
    for change, message in (
        ({"schema_version": 4}, "schema_version 4"),
        ({"schema_version": 1}, "unknown network settings"),  # schema 1 has no decoder
        ({"config": {**data["config"], "decoder": "beam"}}, "decoder 'beam'"),
    ):
        buffer = io.BytesIO()
        torch.save({**data, **change}, buffer)
        bad = tmp_path / "bad.pt"
        bad.write_bytes(buffer.getvalue())
        with pytest.raises(CheckpointError, match=message) as err:
            load_policy(bad)
        assert "\n" not in str(err.value)


def test_a_league_run_trains_a_sequential_value_network_and_resumes(tmp_path) -> None:
    from leaguezero.common.config import load_config
    from leaguezero.common.events import read_events
    from leaguezero.diplomacy.train.loop import TRAIN_STEP_EVENT, LeagueTrainer

    DiplomacyPolicy(SEQUENTIAL, seed=2).save(tmp_path / "src.pt")
    tiny = ["max_years=1", "train.group_size=2", "league.eval_games=1"]
    tiny += ["league.eval_every=1000", "league.bootstrap=0", "train.value_coef=1.0"]
    cfg = load_config(DiplomacyConfig, None, [*tiny, "train.steps=1"])
    run = tmp_path / "run"
    trainer = LeagueTrainer(cfg, run, init_from=tmp_path / "src.pt")
    assert (trainer.cfg.model.decoder, trainer.cfg.model.value_head) == ("sequential", True)
    assert isinstance(trainer.trainer, ValueGRPOTrainer)
    trainer.run()
    cfg2 = load_config(DiplomacyConfig, run / "config.yaml", ["train.steps=2"])
    LeagueTrainer(cfg2, run, resume=True).run()  # the run's network shape comes back
    steps = read_events(run / "events.ndjson", TRAIN_STEP_EVENT)
    assert [e["step"] for e in steps] == [1, 2]
    assert all(e["value_boards"] > 0 and e["value_mse"] >= 0 for e in steps)
    saved = sorted((run / "checkpoints").glob("*.pt"))
    assert saved and all(load_policy(path).config == SEQUENTIAL for path in saved)


def test_pretrain_policy_cli_with_the_sequential_decoder_reports_value_calibration(
    tmp_path,
) -> None:
    import json

    from typer.testing import CliRunner

    from leaguezero.cli import app

    out = tmp_path / "seq.pt"
    args = ["diplomacy", "pretrain-policy", "--out", str(out), "--games", "2"]
    args += ["--max-years", "1", "--seats", "dumb_bot,random_bot", "--epochs", "2"]
    args += ["--hidden", "16", "--layers", "1", "--val-games", "1", "--seed", "3"]
    args += ["--decoder", "sequential", "--value-coef", "0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["val_value"]["baseline_mse"] >= 0
    report = json.loads((tmp_path / "seq.json").read_text())
    assert report["policy_config"]["decoder"] == "sequential"
    assert report["val_value"]["n"] > 0 and report["val_value"]["bins"]
    assert "--decoder sequential --value-coef 0.5" in report["command"]
    assert load_policy(out).config.value_head
