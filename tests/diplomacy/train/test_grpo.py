"""GRPO math on tiny known cases, and an update that moves only the hero's parameters."""

from __future__ import annotations

import math

import pytest
import torch

from leaguezero.diplomacy.game.records import ActionRecord, seat_game
from leaguezero.diplomacy.train.credit import group_advantages, phase_advantages
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_loss import grpo_loss
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings, scheduled_lr

torch.set_num_threads(1)


def test_group_advantages_are_standardised_scores() -> None:
    adv = group_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]), eps=0.0)
    std = math.sqrt(1.25)  # population std of 1..4
    assert torch.allclose(adv, torch.tensor([-1.5, -0.5, 0.5, 1.5]) / std)
    # A group whose games all scored the same carries no signal (zeros, not NaN).
    assert torch.equal(group_advantages(torch.tensor([5.0, 5.0, 5.0])), torch.zeros(3))


def test_clipped_surrogate_on_known_ratios() -> None:
    old = torch.zeros(2)
    new = torch.full((2,), math.log(1.5), requires_grad=True)  # ratio 1.5 for both records
    adv = torch.tensor([1.0, -1.0])
    index = torch.tensor([0, 1])  # one record per game, two games: weights 1/2 each
    parts = grpo_loss(new, old, adv, index, clip_eps=0.2)
    # Positive advantage: min(1.5, 1.2) = 1.2 (clipped, no gradient); negative: min(-1.5, -1.2)
    # = -1.5 (the pessimistic, unclipped term keeps its gradient -A * r = 1.5).
    assert parts.policy_loss.item() == pytest.approx(-(1.2 - 1.5) / 2)
    assert parts.clip_fraction.item() == pytest.approx(1.0)
    parts.loss.backward()
    assert new.grad is not None
    assert new.grad[0].item() == pytest.approx(0.0)
    assert new.grad[1].item() == pytest.approx(0.5 * 1.5)


def test_records_average_per_game_then_over_games() -> None:
    # Game 0 has one record, game 1 has three; on-policy ratios are 1, so the loss is
    # -(mean over games of the game's advantage) regardless of record counts.
    new = torch.zeros(4, requires_grad=True)
    adv = torch.tensor([2.0, -1.0, -1.0, -1.0])
    parts = grpo_loss(new, torch.zeros(4), adv, torch.tensor([0, 1, 1, 1]))
    assert parts.policy_loss.item() == pytest.approx(-(2.0 - 1.0) / 2)
    parts.loss.backward()
    assert torch.allclose(new.grad, torch.tensor([-1.0, 1 / 6, 1 / 6, 1 / 6]))


def test_kl_to_reference_is_zero_at_the_reference_and_positive_away() -> None:
    logp = torch.log(torch.tensor([0.5, 0.25]))
    index = torch.tensor([0, 0])
    same = grpo_loss(logp.clone(), logp, torch.ones(2), index, ref_log_prob=logp, kl_coef=1.0)
    assert same.kl.item() == pytest.approx(0.0, abs=1e-7)
    moved = grpo_loss(logp + 0.3, logp, torch.ones(2), index, ref_log_prob=logp, kl_coef=1.0)
    assert moved.kl.item() > 0
    assert moved.loss.item() == pytest.approx(moved.policy_loss.item() + moved.kl.item())


class _Bandit:
    """A two-armed softmax policy: a GRPOPolicy whose records are arm indices."""

    recompute_old_log_probs = False

    def __init__(self) -> None:
        self.logits = torch.nn.Parameter(torch.zeros(2))

    @staticmethod
    def record_size(record):
        return 1

    def log_prob(self, records):
        arms = torch.tensor([r.payload for r in records])
        return torch.log_softmax(self.logits, 0)[arms]

    def trainable_parameters(self):
        return [self.logits]

    def token_log_probs(self, records):
        return list(self.log_prob(records)[:, None].unbind(0))


def test_trainer_moves_probability_towards_the_better_game() -> None:
    bandit = _Bandit()
    trainer = GRPOTrainer(bandit, GRPOSettings(lr=0.1, epochs=3))  # type: ignore[arg-type]
    half = math.log(0.5)
    games = [
        seat_game(10.0, [ActionRecord("FRANCE", "S1901M", half, 1)]),
        seat_game(2.0, [ActionRecord("FRANCE", "S1901M", half, 0)]),
    ]
    metrics = trainer.step([games])
    assert torch.softmax(bandit.logits.detach(), 0)[1] > 0.5
    assert metrics["records"] == 2 and metrics["score_mean"] == 6.0
    assert metrics["clip_fraction"] >= 0.0 and metrics["adv_abs_mean"] == pytest.approx(1.0, 1e-4)
    # Identical scores: no advantage, no update.
    before = bandit.logits.detach().clone()
    flat = trainer.step([[seat_game(3.0, games[0].records), seat_game(3.0, games[1].records)]])
    assert flat["records"] == 0 and torch.equal(bandit.logits.detach(), before)


def test_phase_credit_counts_only_the_score_gained_from_each_phase_on() -> None:
    def rec(phase: str) -> ActionRecord:
        return ActionRecord("FRANCE", phase, 0.0, 0)

    # Game A ends on 6 but gained nothing after S1901M; game B ends on 4 after a bad spring
    # and a good autumn. A retreat phase only game A had carries no comparison.
    a = seat_game(
        6.0, [rec("S1901M"), rec("F1901M"), rec("F1901R")],
        {"S1901M": 4.5, "F1901M": 6.0, "F1901R": 6.0},
    )  # fmt: skip
    b = seat_game(4.0, [rec("S1901M"), rec("F1901M")], {"S1901M": 4.5, "F1901M": 3.0})
    advs = phase_advantages([a, b], eps=0.0)
    # Returns to go: A 1.5, 0, 0; B -0.5, 1.0. Phase means: S 0.5, F 0.5; residuals +-1, -+0.5.
    scale = math.sqrt((1 + 0.25 + 1 + 0.25) / 4)  # the lone retreat phase is left out
    assert advs[0] == pytest.approx([1 / scale, -0.5 / scale, 0.0])
    assert advs[1] == pytest.approx([-1 / scale, 0.5 / scale])
    # The first phase starts equal in every game: its credit is the game's, up to the scale.
    game = group_advantages(torch.tensor([6.0, 4.0]), eps=0.0)
    assert math.copysign(1, advs[0][0]) == math.copysign(1, float(game[0]))

    bandit = _Bandit()
    trainer = GRPOTrainer(bandit, GRPOSettings(lr=0.1, credit="phase"))  # type: ignore[arg-type]
    metrics = trainer.step([[a, b]])
    assert metrics["records"] == 5 and metrics["adv_abs_mean"] > 0
    with pytest.raises(ValueError, match="phase_start"):
        trainer.step([[seat_game(1.0, [rec("S1901M")]), seat_game(2.0, [rec("S1901M")])]])
    with pytest.raises(ValueError, match="credit must be one of game, phase"):
        GRPOSettings(credit="turn")


def test_resuming_keeps_the_optimizer_moments_and_the_configured_learning_rate() -> None:
    bandit = _Bandit()
    trainer = GRPOTrainer(bandit, GRPOSettings(lr=0.1))  # type: ignore[arg-type]
    half = math.log(0.5)
    trainer.step(
        [
            [
                seat_game(10.0, [ActionRecord("FRANCE", "S1901M", half, 1)]),
                seat_game(2.0, [ActionRecord("FRANCE", "S1901M", half, 0)]),
            ]
        ]
    )
    resumed = GRPOTrainer(bandit, GRPOSettings(lr=0.5))  # type: ignore[arg-type]  # --resume --set train.lr
    resumed.load_state_dict(trainer.state_dict())
    assert resumed.optimizer.param_groups[0]["lr"] == 0.5
    moments = resumed.optimizer.state[bandit.logits]
    assert int(moments["step"]) == 1 and float(moments["exp_avg"].abs().sum()) > 0


def test_update_from_real_games_changes_only_the_hero() -> None:
    pytest.importorskip("diplomacy")
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.env import POWERS
    from leaguezero.diplomacy.game.rollout import run_rollout

    hero, opponent = DiplomacyPolicy(seed=1), DiplomacyPolicy(seed=2)
    opponent_before = [p.detach().clone() for p in opponent.trainable_parameters()]
    hero_before = [p.detach().clone() for p in hero.trainable_parameters()]
    cfg = DiplomacyConfig(max_years=2, games_dir=None, record_observations=False)
    seats = dict.fromkeys(POWERS, "opponent") | {"FRANCE": "hero", "ITALY": "random_bot"}
    games = []
    for game_idx in range(4):
        actors = []

        def resolve(spec, game_idx=game_idx, actors=actors):
            policy = hero if spec.name == "hero" else opponent
            actor = policy.actor(seed=game_idx * 10 + len(actors))
            actors.append((spec.name, actor))
            return actor

        result = run_rollout(cfg, 0, game_idx, seats, "FRANCE", resolver=resolve)
        records = [r for name, a in actors if name == "hero" for r in a.records]
        assert records and all(r.power == "FRANCE" for r in records)
        games.append(seat_game(result.scores["FRANCE"], records))
    if len({g.score for g in games}) == 1:  # pragma: no cover - seeds chosen to differ
        pytest.skip("all four games scored the same; no advantage to learn from")
    trainer = GRPOTrainer(hero, GRPOSettings(lr=1e-2))
    metrics = trainer.step([games])
    assert metrics["records"] > 0 and math.isfinite(metrics["loss"])
    changed = [
        not torch.equal(a, b.detach())
        for a, b in zip(hero_before, hero.net.parameters(), strict=True)
    ]
    assert any(changed)
    for before, after in zip(opponent_before, opponent.trainable_parameters(), strict=True):
        assert torch.equal(before, after.detach())


def test_cosine_schedule_falls_from_lr_to_its_final_fraction_and_stays() -> None:
    lrs = [scheduled_lr(2e-3, t, 11, "cosine", 0.1) for t in range(1, 15)]
    assert lrs[0] == pytest.approx(2e-3) and lrs[10] == pytest.approx(2e-4)
    assert lrs[5] == pytest.approx(1.1e-3)  # halfway: the mean of the two ends
    assert all(a > b for a, b in zip(lrs[:10], lrs[1:11], strict=True))  # noqa: RUF007
    assert lrs[11:] == [pytest.approx(2e-4)] * 3  # past the last step: the final rate
    assert scheduled_lr(2e-3, 7, 11, "constant", 0.1) == 2e-3
    assert scheduled_lr(2e-3, 1, 1, "cosine", 0.1) == 2e-3  # a one-step run
    with pytest.raises(ValueError, match="constant, cosine"):
        scheduled_lr(1e-3, 1, 10, "linear", 0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        scheduled_lr(1e-3, 1, 10, "cosine", 1.5)


def test_set_lr_sets_the_rate_of_the_next_update() -> None:
    bandit = _Bandit()
    trainer = GRPOTrainer(bandit, GRPOSettings(lr=0.1))  # type: ignore[arg-type]
    trainer.set_lr(1e-9)
    half = math.log(0.5)
    games = [
        seat_game(10.0, [ActionRecord("FRANCE", "S1901M", half, 1)]),
        seat_game(2.0, [ActionRecord("FRANCE", "S1901M", half, 0)]),
    ]
    trainer.step([games])
    # Adam's first step moves each parameter by ~lr: at 1e-9 the policy stays put.
    assert torch.allclose(torch.softmax(bandit.logits.detach(), 0), torch.tensor([0.5, 0.5]))
    trainer.set_lr(0.1)
    trainer.step([games])
    assert torch.softmax(bandit.logits.detach(), 0)[1] > 0.5
    trainer.set_lr(0.0)  # a cosine schedule's last step with lr_final 0
    with pytest.raises(ValueError, match=">= 0"):
        trainer.set_lr(-1e-3)


class _SizedBandit(_Bandit):
    """A bandit that counts the records of each log_prob call and sizes records by phase."""

    recompute_old_log_probs = True

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1]))
        self.calls: list[int] = []

    def log_prob(self, records):
        self.calls.append(len(records))
        return super().log_prob(records)

    @staticmethod
    def record_size(record):
        return len(record.phase)


def test_gradient_accumulation_passes_match_one_pass() -> None:
    def games(seed):
        gen = torch.Generator().manual_seed(seed)
        out = []
        for g in range(4):
            n = 1 + g  # games of different lengths: per-game weights differ
            arms = torch.randint(0, 3, (n,), generator=gen).tolist()
            recs = [ActionRecord("FRANCE", "S" * (1 + i % 3), -1.1, a) for i, a in enumerate(arms)]
            out.append(seat_game(float(g * g), recs))
        return out

    groups = [games(1), games(2)]
    results = {}
    for per_pass in (None, 3):
        bandit = _SizedBandit()
        reference = _SizedBandit()
        settings = GRPOSettings(lr=0.05, epochs=2, kl_coef=0.5, records_per_pass=per_pass)
        trainer = GRPOTrainer(bandit, settings, reference=reference)  # type: ignore[arg-type]
        metrics = trainer.step(groups)
        results[per_pass] = (bandit.logits.detach().clone(), metrics, bandit.calls)
    (one, m_one, calls_one), (acc, m_acc, calls_acc) = results[None], results[3]
    assert calls_one == [20, 20] and calls_acc == [3] * 6 + [2] + [3] * 6 + [2]
    assert torch.allclose(one, acc, atol=1e-6)
    for key in ("loss", "policy_loss", "kl", "clip_fraction", "ratio_mean", "grad_norm"):
        assert m_acc[key] == pytest.approx(m_one[key], abs=1e-6), key
    assert m_one["old_log_prob_gap"] == pytest.approx(m_acc["old_log_prob_gap"], abs=1e-6)
    with pytest.raises(ValueError, match="records_per_pass"):
        GRPOSettings(records_per_pass=0)


def test_a_pass_over_the_trim_threshold_hands_freed_memory_back(monkeypatch) -> None:
    import leaguezero.diplomacy.train.grpo as grpo

    recs = [ActionRecord("FRANCE", "S", -1.1, a % 3) for a in range(5)]
    groups = [[seat_game(1.0, recs), seat_game(0.0, recs[:2])]]
    trims: list[int] = []
    monkeypatch.setattr(grpo, "release_freed_memory", lambda: trims.append(1))
    monkeypatch.setattr(grpo, "rss_mb", lambda: 3000.0)  # 3.15 GB
    for threshold, expected in ((None, 0), (4.0, 0), (3.0, 4)):  # 4 passes of 2, 2, 2, 1
        trims.clear()
        settings = GRPOSettings(lr=0.05, records_per_pass=2, trim_above_gb=threshold)
        GRPOTrainer(_SizedBandit(), settings).step(groups)  # type: ignore[arg-type]
        assert len(trims) == expected, threshold


class _ManyArms(_Bandit):
    def __init__(self, arms: int) -> None:
        self.logits = torch.nn.Parameter(torch.zeros(arms))


def _step_gradient(trainer: GRPOTrainer, policy: _ManyArms, groups, seed: int) -> torch.Tensor:
    policy.logits.grad = None
    metrics = trainer.step(groups, seed=seed)
    assert policy.logits.grad is not None
    return policy.logits.grad.detach().clone(), metrics


def test_a_record_budget_trains_on_that_many_and_keeps_the_gradient_unbiased() -> None:
    arms = 5
    rec = [ActionRecord("FRANCE", "S1901M", math.log(1 / arms), a) for a in range(arms)]
    # Three games with 1, 4 and 7 records: the budget of 6 keeps one of the first, and the
    # others in proportion; the per-game mean makes a uniform draw within a game unbiased.
    groups = [
        [
            seat_game(9.0, [rec[0]]),
            seat_game(4.0, [rec[1], rec[2], rec[2], rec[3]]),
            seat_game(1.0, [rec[4], rec[3], rec[1], rec[0], rec[4], rec[4], rec[2]]),
        ]
    ]

    def trainer(policy, budget):
        settings = GRPOSettings(lr=0.0, max_grad_norm=1e9, max_records=budget)
        out = GRPOTrainer(policy, settings)  # type: ignore[arg-type]
        return out

    full_policy = _ManyArms(arms)
    full, metrics = _step_gradient(trainer(full_policy, None), full_policy, groups, 0)
    assert metrics["records"] == metrics["records_played"] == 12
    policy = _ManyArms(arms)
    budgeted = trainer(policy, 6)
    draws = [_step_gradient(budgeted, policy, groups, seed) for seed in range(3000)]
    assert all(m["records"] == 6 and m["records_played"] == 12 for _, m in draws)
    # The same seed draws the same records (a resumed step trains on what it did).
    assert torch.equal(draws[7][0], _step_gradient(budgeted, policy, groups, 7)[0])
    assert len({tuple(g.tolist()) for g, _ in draws[:50]}) > 1  # the draws differ
    mean = torch.stack([g for g, _ in draws]).mean(0)
    assert torch.allclose(mean, full, atol=0.02 * float(full.abs().max())), (mean, full)


def test_a_budget_under_the_games_keeps_one_record_of_that_many_games() -> None:
    import random

    from leaguezero.diplomacy.train.grpo import budget_records

    game_index = [0, 0, 1, 2, 2, 2, 3]
    keep = budget_records(game_index, 2, random.Random(3))
    assert len(keep) == 2 and len({game_index[i] for i in keep}) == 2
    assert keep == sorted(keep)
    # Within budget: every game keeps at least one, and the largest remainders take the rest.
    keep = budget_records(game_index, 5, random.Random(3))
    counts = [sum(game_index[i] == g for i in keep) for g in range(4)]
    assert sum(counts) == 5 and min(counts) >= 1 and counts[2] == 2
    with pytest.raises(ValueError, match="max_records"):
        GRPOSettings(max_records=0)
