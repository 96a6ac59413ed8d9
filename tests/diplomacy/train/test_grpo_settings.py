"""The GRPO trainer's settings (:mod:`leaguezero.diplomacy.train.grpo_settings`): one frozen
value made from the config where a run starts, validated when made, and the KL warm-up the
trainer applies itself (``GRPOTrainer.kl_coef_at``, logged as each step's ``kl_coef``)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from leaguezero.common.config import load_config
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.records import ActionRecord, seat_game
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings


class _Bandit:
    """Two arms, one logit each: a record's action is the arm index."""

    recompute_old_log_probs = False

    def __init__(self) -> None:
        self.logits = torch.nn.Parameter(torch.zeros(2))
        self.reference_calls = 0

    def record_size(self, record: ActionRecord) -> int:
        return 1

    def token_log_probs(self, records):
        logp = torch.log_softmax(self.logits, dim=0)
        return [logp[r.payload].reshape(1) for r in records]

    def trainable_parameters(self):
        return [self.logits]


class _Reference(_Bandit):
    def token_log_probs(self, records):
        self.reference_calls += 1
        return super().token_log_probs(records)


def _games():
    half = math.log(0.5)
    return [
        seat_game(10.0, [ActionRecord("FRANCE", "S1901M", half, 1)]),
        seat_game(0.0, [ActionRecord("FRANCE", "S1901M", half, 0)]),
    ]


def test_from_config_reads_the_train_section_once() -> None:
    cfg = load_config(
        DiplomacyConfig,
        None,
        ["train.lr=0.02", "train.kl_coef=0.3", "train.kl_warmup_steps=5", "train.epochs=3"],
    )
    settings = GRPOSettings.from_config(cfg, records_per_pass=7)
    assert (settings.lr, settings.kl_coef, settings.kl_warmup_steps) == (0.02, 0.3, 5)
    assert (settings.epochs, settings.ratio, settings.is_correction) == (3, "token", "truncate")
    # train.records_per_pass: 0 is the hero's size, max_records: 0 no budget, one token each.
    assert (settings.records_per_pass, settings.max_records, settings.token_budget) == (7, None, 1)
    llm = load_config(DiplomacyConfig, None, ["train.agent=llm", "train.records_per_pass=4"])
    llm_settings = GRPOSettings.from_config(llm, records_per_pass=7)
    assert llm_settings.records_per_pass == 4
    assert llm_settings.token_budget == llm.llm.max_new_tokens
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.kl_coef = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ratio", "word", "ratio must be one of"),
        ("aggregation", "sum", "aggregation must be one of"),
        ("is_correction", "clip", "is_correction must be one of"),
        ("is_cap", 1.0, "is_cap must be > 1"),
        ("kl_warmup_steps", -1, "KL warm-up steps must be >= 0"),
        ("value_coef", -0.1, "value_coef must be >= 0"),
    ],
)
def test_settings_refuse_values_out_of_range(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GRPOSettings(**{field: value})


def test_the_trainer_warms_the_kl_weight_up_and_logs_it() -> None:
    settings = GRPOSettings(lr=0.1, kl_coef=0.3, kl_warmup_steps=4)
    reference = _Reference()
    trainer = GRPOTrainer(_Bandit(), settings, reference=reference)  # type: ignore[arg-type]
    assert [trainer.kl_coef_at(s) for s in (1, 2, 3, 4, 9)] == pytest.approx(
        [0.0, 0.1, 0.2, 0.3, 0.3]
    )
    assert trainer.kl_coef_at(None) == 0.3  # outside a run: the full weight
    first = trainer.step([_games()], global_step=1)
    # Step 1 of the warm-up has no KL term: the reference is not even asked.
    assert first["kl_coef"] == 0.0 and reference.reference_calls == 0
    second = trainer.step([_games()], global_step=2)
    assert second["kl_coef"] == pytest.approx(0.1) and reference.reference_calls == 1
    assert second["kl"] > 0  # the first update moved the policy off the reference
