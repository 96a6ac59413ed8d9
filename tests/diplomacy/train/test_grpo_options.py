"""The GRPO options of issue 39 (train/grpo_loss.py), each shown on a case small enough to
compute by hand: ratio kinds, clip-higher, loss aggregation, truncated answers, the sampler's
importance weight and its alarm, the config's refusal of weights that cannot be right, and an
LLM hero scored at the temperature it sampled at (the sampler's numbers equal the trainer's)."""

from __future__ import annotations

import math

import pytest
import torch

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.records import ActionRecord, seat_game
from leaguezero.diplomacy.train.credit import group_advantages
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_loss import (
    grpo_loss,
    importance_weights,
    mismatch_warning,
    token_weights,
)
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings

torch.set_num_threads(1)


def _answer(tokens: int, moved: float):
    """One record of ``tokens`` tokens whose log-probs each moved by ``moved``."""
    old = torch.full((1, tokens), -1.0)
    new = (old + moved).requires_grad_(True)
    return new, old


@pytest.mark.parametrize(
    ("ratio", "clipped", "ratio_mean"),
    [
        ("sequence_sum", 1.0, math.exp(0.2)),  # 40 x 0.005 = 0.2 > log(1.2): the answer is clipped
        ("sequence_mean", 0.0, math.exp(0.005)),  # GSPO: the length mean moved 0.005
        ("token", 0.0, math.exp(0.005)),  # each token moved 0.005
    ],
)
def test_ratio_kinds_on_a_long_answer_whose_tokens_barely_moved(ratio, clipped, ratio_mean):
    new, old = _answer(40, 0.005)
    parts = grpo_loss(new, old, torch.ones(1), torch.zeros(1, dtype=torch.int64), ratio=ratio)
    assert float(parts.clip_fraction) == clipped
    assert float(parts.ratio_mean) == pytest.approx(ratio_mean, rel=1e-5)
    parts.loss.backward()
    # A clipped answer with a positive advantage gives no gradient; an unclipped one does.
    assert (new.grad.abs().sum() > 0) == (clipped == 0.0)


def test_one_token_records_give_the_same_loss_for_every_ratio_kind():
    new = torch.tensor([-0.5, -1.2, -0.1], requires_grad=True)
    old = torch.tensor([-0.7, -1.0, -0.1])
    adv, index = torch.tensor([1.0, -1.0, 0.5]), torch.tensor([0, 0, 1])
    losses = {
        kind: float(grpo_loss(new, old, adv, index, ratio=kind).loss.detach())
        for kind in ("sequence_sum", "sequence_mean", "token")
    }
    assert len({round(v, 7) for v in losses.values()}) == 1
    # The default is the loss before issue 39: -mean_g mean_i min(r A, clip(r) A).
    r = torch.exp(new - old).detach()
    terms = torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv)
    expected = -(terms[:2].mean() + terms[2]) / 2
    assert losses["sequence_sum"] == pytest.approx(float(expected), rel=1e-6)


def test_epsilon_high_lets_a_favoured_token_rise_further():
    new = torch.tensor([math.log(1.25) - 1.0], requires_grad=True)  # ratio 1.25
    old = torch.tensor([-1.0])
    index = torch.zeros(1, dtype=torch.int64)
    symmetric = grpo_loss(new, old, torch.ones(1), index, clip_eps=0.2)
    symmetric.loss.backward()
    assert float(symmetric.clip_fraction) == 1.0 and float(new.grad.abs()) == 0.0
    new.grad = None
    higher = grpo_loss(new, old, torch.ones(1), index, clip_eps=0.2, epsilon_high=0.28)
    higher.loss.backward()
    assert float(higher.clip_fraction) == 0.0 and float(new.grad.abs()) > 0
    # The low side keeps clip_eps: a ratio of 0.75 with a negative advantage is clipped.
    low = grpo_loss(
        torch.tensor([math.log(0.75)]), torch.zeros(1), -torch.ones(1), index, epsilon_high=0.28
    )
    assert float(low.clip_fraction) == 1.0


def test_loss_aggregations_weigh_tokens_as_documented():
    lengths = torch.tensor([1, 3, 2])  # game 0: records 0 and 1; game 1: record 2
    index = torch.tensor([0, 0, 1])
    grpo = token_weights(lengths, index, "grpo")
    # Per record: 1/2 game records x 1/2 games, spread over its tokens; game 1's one record 1/2.
    assert grpo.sum(1).tolist() == pytest.approx([0.25, 0.25, 0.5])
    assert grpo[1].tolist() == pytest.approx([0.25 / 3] * 3)
    dapo = token_weights(lengths, index, "dapo")
    assert dapo[dapo > 0].tolist() == pytest.approx([1 / 6] * 6)  # every token alike
    dr = token_weights(lengths, index, "dr_grpo", token_budget=4)
    assert dr[dr > 0].tolist() == pytest.approx([1 / 12] * 6)  # 3 records x 4 tokens
    assert float(dr.sum()) == pytest.approx(0.5)  # not renormalised: a constant divisor
    with pytest.raises(ValueError, match="aggregation"):
        token_weights(lengths, index, "mean")


class _TokenBandit:
    """A policy over two-token answers: each token is an arm of one softmax (recomputed old
    log-probs, as the LLM hero); a record's payload is its two arms."""

    recompute_old_log_probs = True

    def __init__(self) -> None:
        self.logits = torch.nn.Parameter(torch.tensor([0.2, -0.1, 0.0]))

    @staticmethod
    def record_size(record):
        return 1

    def token_log_probs(self, records):
        log_p = torch.log_softmax(self.logits, 0)
        return [log_p[torch.tensor(r.payload)] for r in records]

    def log_prob(self, records):
        return torch.stack([t.sum() for t in self.token_log_probs(records)])

    def trainable_parameters(self):
        return [self.logits]


def _games(sampler_shift: float = 0.0, truncated: bool = False):
    """Two games of two-token answers; the sampler reports each answer ``sampler_shift``
    per token below the trainer's numbers."""
    log_p = torch.log_softmax(torch.tensor([0.2, -0.1, 0.0]), 0)

    def rec(arms, cut=False):
        old = float(log_p[torch.tensor(arms)].sum()) - sampler_shift * len(arms)
        return ActionRecord("FRANCE", "S1901M", old, arms, tokens=len(arms), truncated=cut)

    return [
        seat_game(10.0, [rec([0, 0]), rec([0, 1], cut=truncated)]),
        seat_game(2.0, [rec([1, 2]), rec([2, 2])]),
    ]


def test_dr_grpo_leaves_advantages_unscaled():
    scores = torch.tensor([10.0, 2.0])
    assert group_advantages(scores).tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert group_advantages(scores, scale=False).tolist() == [4.0, -4.0]
    metrics = GRPOTrainer(_TokenBandit(), GRPOSettings(aggregation="dr_grpo", token_budget=2)).step(
        [_games()]
    )
    assert metrics["adv_abs_mean"] == pytest.approx(4.0)


def test_truncated_answers_are_counted_and_masked_on_request():
    kept = GRPOTrainer(_TokenBandit()).step([_games(truncated=True)])
    assert kept["records"] == 4 and kept["truncated_share"] == 0.25
    masked = GRPOTrainer(_TokenBandit(), GRPOSettings(mask_truncated=True)).step(
        [_games(truncated=True)]
    )
    assert masked["records"] == 3 and masked["truncated_share"] == 0.25
    assert masked["tokens_mean"] == 2.0


def test_importance_weights_truncate_or_mask_beyond_the_cap():
    trainer = torch.tensor([-2.0, -2.0, -2.0, -2.0])
    sampler = torch.tensor([-2.0, -2.0 - 2 * math.log(3), -2.0 + 2 * math.log(3), -2.4])
    lengths = torch.tensor([2, 2, 2, 2])  # per-token log ratios 0, log 3, -log 3, 0.2
    w, stats = importance_weights(trainer, sampler, lengths, correction="truncate", cap=2.0)
    assert w.tolist() == pytest.approx([1.0, 2.0, 1 / 3, math.exp(0.2)])
    assert stats["is_ratio_max"] == pytest.approx(3.0) and stats["is_ratio_min"] == pytest.approx(
        1 / 3
    )
    assert stats["is_capped_share"] == 0.25 and stats["is_outside_share"] == 0.5
    masked, _ = importance_weights(trainer, sampler, lengths, correction="mask", cap=2.0)
    assert masked.tolist() == [1.0, 0.0, 1.0, 1.0]
    none, _ = importance_weights(trainer, sampler, lengths, correction="none")
    assert none.tolist() == [1.0] * 4


def test_every_step_reports_the_sampler_weight_and_warns_beyond_the_threshold():
    agree = GRPOTrainer(_TokenBandit(), GRPOSettings(is_correction="truncate")).step([_games()])
    assert agree["is_ratio_min"] == pytest.approx(1.0) == agree["is_ratio_max"]
    assert agree["is_outside_share"] == 0.0 and agree["old_log_prob_gap"] < 1e-6
    assert mismatch_warning(agree, 0.05, 2.0) is None
    # A sampler 1 nat per token below the trainer: rho = e > 2 for every answer.
    off = {}
    for correction in ("none", "truncate", "mask"):
        trainer = GRPOTrainer(_TokenBandit(), GRPOSettings(is_correction=correction))
        off[correction] = trainer.step([_games(sampler_shift=1.0)])
    assert off["none"]["is_ratio_mean"] == pytest.approx(math.e, rel=1e-5)
    assert off["none"]["is_capped_share"] == 1.0
    assert off["none"]["old_log_prob_gap"] == pytest.approx(2.0, rel=1e-5)
    # truncate: every term weighed by the cap 2; mask: every answer dropped (no policy loss).
    assert off["truncate"]["epoch1_grad_norm"] == pytest.approx(
        2 * off["none"]["epoch1_grad_norm"], rel=1e-5
    )
    assert off["mask"]["policy_loss"] == 0.0
    warning = mismatch_warning(off["none"], 0.05, 2.0)
    assert warning is not None and "100.0% of answers" in warning


def test_token_ratio_needs_per_token_old_log_probs():
    class _Sampled(_TokenBandit):
        recompute_old_log_probs = False

    with pytest.raises(ValueError, match="per-token"):
        GRPOTrainer(_Sampled(), GRPOSettings(ratio="token")).step([_games()])
    assert (
        GRPOTrainer(_Sampled(), GRPOSettings(ratio="sequence_mean")).step([_games()])["records"]
        == 4
    )


def test_config_refuses_a_sampler_weight_that_compares_two_temperatures():
    llm = {"train": {"agent": "llm", "temperature": 0.7}}
    assert DiplomacyConfig.model_validate(llm).train.score_temperature == "sampling"
    with pytest.raises(ValueError, match="raw"):
        DiplomacyConfig.model_validate({**llm, "llm": {"backend": "openai"}})
    ok = {"agent": "llm", "temperature": 0.7, "is_correction": "none"}
    DiplomacyConfig.model_validate({"train": ok, "llm": {"backend": "openai"}})
    with pytest.raises(ValueError, match="score_temperature"):
        DiplomacyConfig.model_validate(
            {"train": {"agent": "llm", "temperature": 0.7, "score_temperature": "one"}}
        )
    # Temperature 1 (every shipped config) and the network hero are never refused.
    DiplomacyConfig.model_validate({"train": {"agent": "llm"}, "llm": {"backend": "openai"}})
    DiplomacyConfig.model_validate({"train": {"temperature": 0.7}, "llm": {"backend": "openai"}})


@pytest.mark.parametrize("mode", ["generate", "constrained"])
def test_llm_hero_scores_at_the_sampling_temperature_as_the_sampler_reports(tmp_path, mode):
    """In process at temperature 0.7: each answer's record has its length, truncation and
    temperature; the trainer's log-probs at 0.7 equal the sampler's (weight 1 for every
    answer), and the old temperature-1 scoring does not."""
    pytest.importorskip("diplomacy")
    pytest.importorskip("peft")
    from leaguezero.diplomacy.game.catalogue import parse_seating
    from leaguezero.diplomacy.game.rollout import run_rollout
    from leaguezero.diplomacy.llm.hero import LLMHero
    from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
    from leaguezero.diplomacy.llm.orders.decoding import decoding_named
    from tests.diplomacy.tiny_lm import build_tiny_lm

    backend = HFBackend.from_pretrained(build_tiny_lm(tmp_path / "lm"))
    budget = 12
    hero = LLMHero(backend, max_new_tokens=budget, temperature=0.7, decoding=decoding_named(mode))
    seating = {p: "random_bot" for p in ("ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA")}
    table = hero.table(parse_seating({"AUSTRIA": "hero", "TURKEY": "hero", **seating}), seed=3)
    game = DiplomacyConfig(max_years=1, games_dir=None)
    run_rollout(game, 0, 0, table.seating, "AUSTRIA", resolver=table.resolver)
    records = table.records
    assert records
    for r in records:
        assert r.tokens == len(r.payload.token_ids) and r.payload.temperature == 0.7
        assert r.truncated == (
            r.tokens == budget and r.payload.token_ids[-1] not in backend.eos_ids
        )
    assert sum(r.truncated for r in records) == sum(s.truncated for s in table.stats.values())
    rows = hero.token_log_probs(records)
    sampler = torch.tensor([r.old_log_prob for r in records])
    trainer = torch.stack([t.sum() for t in rows]).detach()
    lengths = torch.tensor([r.tokens for r in records])
    _, stats = importance_weights(trainer, sampler, lengths)
    assert stats["is_log_ratio_abs_mean"] < 1e-4 and stats["is_outside_share"] == 0.0
    hero.score_at_temperature = False  # the trainer before issue 39: temperature 1
    at_one = torch.stack([t.sum() for t in hero.token_log_probs(records)]).detach()
    assert float((at_one - sampler).abs().mean()) > 100 * float((trainer - sampler).abs().mean())
