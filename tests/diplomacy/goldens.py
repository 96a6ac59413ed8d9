"""Goldens a reviewer can read in a diff: a bot-game transcript, a GRPO loss curve and the
shipped policy's orders.

Regenerate both with one command (then read the diff before committing it)::

    PYTHONPATH=src python -m tests.diplomacy.goldens

``bot_game.txt``: one seeded two-year game of the three bots through the real rollout
(every phase's orders, the final centres and scores). ``grpo_loss_curve.txt``: 25 GRPO steps
of :class:`~leaguezero.diplomacy.train.grpo.GRPOTrainer` on a three-armed bandit (arm rewards
0, 1, 2; groups of 4 seeded draws), one line of metrics per step — the reward mean climbs
towards 2 as probability moves to the best arm. ``tests/diplomacy/test_goldens.py`` compares
fresh output with both files. ``pretrained_orders.txt``: ``policy_schema1.pt`` (the shipped
``pretrained`` until 2026-12-06: schema 1, independent decoder, no value head) at all seven
seats of one seeded two-year game, sampled at temperature 1: every order with its sampled
log-probability (4 decimals). It was written before the sequential decoder and the value head
(issue 53), so it pins that an old checkpoint still loads and plays exactly as before.
``shipped_policy_orders.txt``: the same game with today's shipped ``pretrained`` (schema 2,
sequential decoder, value head), which pins how it plays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent / "goldens"
BOT_GAME = HERE / "bot_game.txt"
LOSS_CURVE = HERE / "grpo_loss_curve.txt"
PRETRAINED_ORDERS = HERE / "pretrained_orders.txt"
SCHEMA1_POLICY = HERE / "policy_schema1.pt"  # 168 KB
SHIPPED_ORDERS = HERE / "shipped_policy_orders.txt"
METRICS = ("loss", "policy_loss", "kl", "clip_fraction", "ratio_mean", "grad_norm", "score_mean")


def bot_game_transcript() -> str:
    """The seeded bot game, as text: a header, one block per phase, the result."""
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.game.env import POWERS
    from leaguezero.diplomacy.game.rollout import run_rollout

    cfg = DiplomacyConfig(run={"seed": 11}, max_years=2, games_dir=None)
    bots = ("greedy_bot", "chaos_bot", "random_bot")
    seating = {power: bots[i % 3] for i, power in enumerate(POWERS)}
    result = run_rollout(cfg, 0, 0, seating, "AUSTRIA")
    lines = [f"seed {cfg.run.seed}, max_years {cfg.max_years}, game seed {result.seed}"]
    lines += [f"{power:8} {seating[power]}" for power in POWERS]
    for phase in result.order_history:
        lines.append("")
        lines.append(phase["phase"])
        for power in POWERS:
            orders = phase["orders"].get(power) or []
            lines.append(f"  {power:8} {', '.join(orders) if orders else '-'}")
    lines.append("")
    lines.append(f"ended by {result.ended_by} after {result.phases} phases, {result.final_year}")
    for power in POWERS:
        lines.append(
            f"{power:8} centres {result.centers[power]:2d}  score {result.scores[power]:.2f}"
        )
    return "\n".join(lines) + "\n"


def pretrained_orders_transcript(max_years: int = 2, path: Path = SCHEMA1_POLICY) -> str:
    """A policy file's sampled orders and log-probs in a seeded self-play game."""
    from leaguezero.diplomacy.agents.policy import load_policy
    from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv

    policy = load_policy(path)
    actors = {p: policy.actor(seed=100 + i, temperature=1.0) for i, p in enumerate(POWERS)}
    env = DiplomacyEnv(max_years=max_years)
    lines = [f"pretrained self-play, max_years {max_years}, actor seeds 100..106"]
    while not env.done:
        lines.append(env.phase)
        for power in POWERS:
            actor = actors[power]
            before = len(actor.records)
            orders = actor.get_orders(env, power)
            logps = [f"{r.old_log_prob:.4f}" for r in actor.records[before:]]
            if orders:
                lines.append(f"  {power:8} {', '.join(orders)} | {' '.join(logps)}")
            env.set_orders(power, orders)
        env.process()
    return "\n".join(lines) + "\n"


@dataclass
class _Arms:
    """A three-armed softmax policy with the GRPO interface; a record's payload is its arm."""

    logits: torch.nn.Parameter
    recompute_old_log_probs: bool = False

    def log_prob(self, records):
        arms = torch.tensor([r.payload for r in records])
        return torch.log_softmax(self.logits, 0)[arms]

    def trainable_parameters(self):
        return [self.logits]

    def token_log_probs(self, records):
        return list(self.log_prob(records)[:, None].unbind(0))

    @staticmethod
    def record_size(record) -> int:
        return 1


def grpo_loss_curve(steps: int = 25) -> str:
    """The bandit's per-step metrics, one line per step (6 decimals)."""
    from leaguezero.diplomacy.game.records import ActionRecord, seat_game
    from leaguezero.diplomacy.train.grpo import GRPOTrainer
    from leaguezero.diplomacy.train.grpo_settings import GRPOSettings

    policy = _Arms(torch.nn.Parameter(torch.zeros(3)))
    trainer = GRPOTrainer(policy, GRPOSettings(lr=0.1, epochs=2))  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(5)
    lines = ["step " + " ".join(METRICS) + " p_best"]
    for step in range(1, steps + 1):
        group = []
        with torch.no_grad():
            log_p = torch.log_softmax(policy.logits, 0)
        for _ in range(4):
            arm = int(torch.multinomial(log_p.exp(), 1, generator=gen))
            record = ActionRecord("AUSTRIA", "S1901M", float(log_p[arm]), arm)
            group.append(seat_game(float(arm), records=[record]))
        metrics = trainer.step([group])
        p_best = float(torch.softmax(policy.logits.detach(), 0)[2])
        values = " ".join(f"{metrics[m]:.6f}" for m in METRICS)
        lines.append(f"{step} {values} {p_best:.6f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write the goldens."""
    HERE.mkdir(exist_ok=True)
    BOT_GAME.write_text(bot_game_transcript())
    LOSS_CURVE.write_text(grpo_loss_curve())
    PRETRAINED_ORDERS.write_text(pretrained_orders_transcript())
    SHIPPED_ORDERS.write_text(pretrained_orders_transcript(path=shipped_policy()))
    print(f"wrote {BOT_GAME}, {LOSS_CURVE}, {PRETRAINED_ORDERS} and {SHIPPED_ORDERS}")


def shipped_policy() -> Path:
    """Today's shipped ``pretrained`` policy file."""
    from leaguezero.diplomacy.game.catalogue import PRETRAINED_DIR, PRETRAINED_FILE

    return PRETRAINED_DIR / PRETRAINED_FILE


if __name__ == "__main__":
    main()
