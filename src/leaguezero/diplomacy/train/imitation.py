"""Imitation first: pretrain the policy network on a bot's orders
(``leaguezero diplomacy pretrain-policy``).

GRPO from random weights against its own snapshots never finds ``dumb_bot``'s strategy (the
hero stays below parity against six of them), so, as is usual for Diplomacy agents, the policy
is first trained to imitate a strong reference and then fine-tuned with GRPO
(``diplomacy train --init-from CKPT``).

1. **Corpus** (:func:`collect_corpus`): bot games played by the phase driver
   (:func:`~leaguezero.diplomacy.game.phase.play_phase`), as
   :func:`~leaguezero.diplomacy.llm.base.corpus.collect_examples` plays them for the LLM base
   (each seat drawn from ``seat_bots``; game ``g`` of seed ``s`` is the same whatever else is
   played, so the held-out games ``games .. games + val_games - 1`` never overlap the training
   ones). Every phase of every
   seat the *teacher* plays becomes the choices the policy network makes there
   (:class:`~leaguezero.diplomacy.agents.actor.NetActor`): one choice per orderable unit over
   its legal orders (movement, retreat), or the adjustment's sequential picks without
   replacement (a build site used once, ``WAIVE`` open). Each choice is an
   :class:`~leaguezero.diplomacy.game.records.ActionRecord` with the policy's own
   :class:`~leaguezero.diplomacy.agents.actor.ChoicePayload` (board features, encoded
   candidates, the index of the teacher's order, temperature 1). A teacher order that is not
   among the candidates (or a unit it left without an order) is skipped and counted; choices
   with a single candidate (nothing to learn) are counted as forced and left out. Builds the
   teacher leaves unused are recorded as ``WAIVE`` picks, which is what the engine does with
   them. Each choice also records the teacher's orders of the units decoded before it (its
   prior: teacher forcing for the sequential decoder), and each phase's board, once the game
   ends, the seat's final score share (the value head's target).
2. **Training** (:func:`train_imitation`): cross-entropy over each choice's candidates, i.e.
   ``-log_prob`` of the teacher's order through :meth:`DiplomacyPolicy.log_prob` (one batched
   pass per minibatch: the same scorer GRPO uses), Adam, shuffled minibatches, a few epochs;
   after each epoch the held-out games' loss and top-1 accuracy
   (:meth:`DiplomacyPolicy.candidate_log_probs`).
3. **Output** (:func:`pretrain_policy`): a normal policy checkpoint (atomic,
   :meth:`DiplomacyPolicy.save`) whose ``extra`` says how it was made (``pretrain`` and a
   first ``lineage`` entry, which ``--init-from`` carries on), and a JSON report beside it
   (``CKPT`` with the suffix ``.json``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leaguezero.common.atomic import atomic_write_json
from leaguezero.diplomacy.agents.actor import ChoicePayload, PhaseBoard, order_site
from leaguezero.diplomacy.agents.decoder import decode_order
from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig
from leaguezero.diplomacy.agents.value import score_shares
from leaguezero.diplomacy.game.bot_base import WAIVE
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.features import board_features, encode_orders
from leaguezero.diplomacy.game.phase import SeatOrders, play_phase
from leaguezero.diplomacy.game.records import ActionRecord
from leaguezero.diplomacy.game.scoring import calculate_final_scores
from leaguezero.diplomacy.game.seats import Policy
from leaguezero.diplomacy.train.imitation_settings import DEFAULT_SEATS, PolicyImitationSettings
from leaguezero.diplomacy.train.value_loss import value_calibration, value_loss

REPORT_KIND = "leaguezero_diplomacy_pretrain_policy"
REPORT_SCHEMA_VERSION = 1


@dataclass
class Corpus:
    """The teacher's choices from a set of games, as the policy network makes them."""

    records: list[ActionRecord]
    games: int = 0
    teacher_seats: int = 0  # (game, power) seats the teacher played
    teacher_phases: int = 0  # phases in which a teacher seat had something to order
    skipped: int = 0  # teacher orders not among the candidates (or units it left unordered)
    forced: int = 0  # choices with one candidate: left out
    seconds: float = 0.0
    # With keep_orders: each record's candidate orders as strings (same order as records).
    orders: list[tuple[str, ...]] | None = field(default=None, repr=False)

    def stats(self) -> dict[str, Any]:
        """The counts (JSON-able), with the mean candidates per choice and the chance level."""
        sizes = [r.payload.cand.shape[0] for r in self.records]
        return {
            "games": self.games,
            "teacher_seats": self.teacher_seats,
            "teacher_phases": self.teacher_phases,
            "choices": len(self.records),
            "skipped": self.skipped,
            "forced": self.forced,
            "mean_candidates": round(float(np.mean(sizes)), 3) if sizes else 0.0,
            "uniform_accuracy": round(float(np.mean([1 / k for k in sizes])), 4) if sizes else 0.0,
            "seconds": round(self.seconds, 2),
            "games_per_second": round(self.games / max(self.seconds, 1e-9), 3),
        }


def game_plan(seed: int, game: int, seat_bots: Sequence[str]) -> tuple[dict[str, str], int]:
    """Game ``game`` of master seed ``seed``: ``({power: bot}, bot seed stream)``, a stable
    function of the two numbers (so training and held-out games never share one)."""
    state = np.random.SeedSequence([seed, game]).generate_state(1)[0]
    rng = random.Random(int(state))
    seats = {p: rng.choice(list(seat_bots)) for p in POWERS}
    return seats, rng.getrandbits(32)


def collect_corpus(
    games: Sequence[int],
    *,
    teacher: str = "dumb_bot",
    seat_bots: Sequence[str] = DEFAULT_SEATS,
    max_years: int = 3,
    seed: int = 0,
    keep_orders: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Corpus:
    """Play the games numbered ``games`` and record the teacher seats' choices (module doc)."""
    from leaguezero.diplomacy.game.bots import make_bot

    started = time.perf_counter()
    corpus = Corpus(records=[], orders=[] if keep_orders else None)
    for done, g in enumerate(games, start=1):
        seats, bot_seed = game_plan(seed, g, seat_bots)
        rng = random.Random(bot_seed)
        bots = {p: make_bot(seats[p], seed=rng.getrandbits(32)) for p in POWERS}
        corpus.teacher_seats += sum(bot == teacher for bot in seats.values())
        env = DiplomacyEnv(max_years=max_years)
        game_boards = _play_teacher_game(corpus, env, seats, bots, teacher)
        shares = score_shares(calculate_final_scores(env.game))  # the rollout's default rules
        for power, board in game_boards:
            board.share = shares[power]  # the value head's target (module doc)
        corpus.games += 1
        if progress is not None:
            progress(done, len(games))
    corpus.seconds = time.perf_counter() - started
    return corpus


def _play_teacher_game(
    corpus: Corpus,
    env: DiplomacyEnv,
    seats: dict[str, str],
    bots: dict[str, Policy],
    teacher: str,
) -> list[tuple[str, PhaseBoard]]:
    """Play ``env`` to its end, ``bots`` at the seats, recording each phase of the teacher's
    seats into ``corpus`` (:func:`_record_phase`); returns their ``(power, board)`` in play
    order, whose boards await the final score share."""
    game_boards: list[tuple[str, PhaseBoard]] = []

    def record(seat: SeatOrders) -> None:
        if seats[seat.power] == teacher:
            corpus.teacher_phases += 1
            board = _record_phase(corpus, env, seat.power, seat.legal, seat.answer)
            game_boards.append((seat.power, board))

    while not env.done:
        play_phase(env, lambda power, _legal: bots[power].get_orders(env, power), record)
    return game_boards


def _record_phase(
    corpus: Corpus, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], raw: list[str]
) -> PhaseBoard:
    """The teacher's orders ``raw`` of one phase as the policy's choices (module doc); returns
    the phase's board. Each choice's prior is the teacher's orders of the units decoded before
    it (:func:`~leaguezero.diplomacy.agents.decoder.decode_order`; in an adjustment phase the
    earlier picks): teacher forcing for the sequential decoder."""
    board = PhaseBoard(torch.from_numpy(board_features(env, power)))
    given = [" ".join(str(order).split()).upper() for order in raw]  # as validate_orders reads
    if env.phase_type == "A":
        owed = env.adjustment_count(power)
        options = list(dict.fromkeys(o for opts in legal.values() for o in opts))
        if owed < 0:
            options = [o for o in options if o.endswith(" D")]
        count = min(abs(owed), len(legal))
        open_orders = list(options)
        picks, picked = 0, []
        wanted = iter(given)
        while picks < count:
            order = next(wanted, None)
            if order is None:  # the teacher gave fewer than owed
                if owed > 0 and WAIVE in open_orders:
                    order = WAIVE  # the engine waives unused builds
                else:
                    corpus.skipped += count - picks
                    break
            if order not in open_orders:
                corpus.skipped += 1
                continue
            prior = encode_orders(picked)
            picks += 1
            picked.append(order)
            _add_choice(corpus, power, env.phase, board, list(open_orders), order, prior)
            if order != WAIVE:
                site = order_site(order)
                open_orders = [o for o in open_orders if order_site(o) != site]
        return board
    chosen = {}  # the teacher's order of each unit it ordered
    for loc, opts in legal.items():
        allowed = set(opts)
        chosen[loc] = next((o for o in given if o in allowed), None)
    rank = {loc: k for k, loc in enumerate(decode_order(legal))}
    # Records keep the engine's unit order (so an independent net trains as before); each
    # prior lists the units decoded earlier, in decoding order.
    for loc, opts in legal.items():
        order = chosen[loc]
        if order is None:
            corpus.skipped += 1
            continue
        earlier = sorted((rank[u], o) for u, o in chosen.items() if o and rank[u] < rank[loc])
        prior = encode_orders([o for _, o in earlier])
        _add_choice(corpus, power, env.phase, board, list(opts), order, prior)
    return board


def _add_choice(
    corpus: Corpus,
    power: str,
    phase: str,
    board: PhaseBoard,
    options: list[str],
    order: str,
    prior: np.ndarray,
) -> None:
    if len(options) == 1:
        corpus.forced += 1
        return
    cand = torch.from_numpy(encode_orders(options))
    payload = ChoicePayload(board, cand, options.index(order), 1.0, torch.from_numpy(prior))
    corpus.records.append(ActionRecord(power, phase, 0.0, payload))
    if corpus.orders is not None:
        corpus.orders.append(tuple(options))


@dataclass
class Evaluation:
    """Cross-entropy and top-1 accuracy of a policy on a set of choices."""

    choices: int
    loss: float
    accuracy: float


def evaluate(
    policy: DiplomacyPolicy, records: Sequence[ActionRecord], chunk: int = 2048
) -> Evaluation:
    """Mean ``-log p(teacher's order)`` and how often the teacher's order is the most probable."""
    if not records:
        return Evaluation(0, float("nan"), float("nan"))
    loss, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(records), chunk):
            log_probs, chosen = policy.candidate_log_probs(records[start : start + chunk])
            loss -= float(log_probs.gather(1, chosen.unsqueeze(1)).sum())
            correct += int((log_probs.argmax(dim=1) == chosen).sum())
    return Evaluation(len(records), loss / len(records), correct / len(records))


def train_imitation(
    policy: DiplomacyPolicy,
    train: Sequence[ActionRecord],
    val: Sequence[ActionRecord],
    settings: PolicyImitationSettings,
    *,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Cross-entropy training of ``policy`` on ``train``; one log line and curve row per epoch."""
    if not train:
        raise ValueError("the corpus holds no teacher choices: play more games")
    rng = np.random.default_rng(settings.seed)
    opt = torch.optim.Adam(policy.trainable_parameters(), lr=settings.lr)
    value_on = policy.net.value_head is not None
    curve: list[dict[str, Any]] = []
    started = time.perf_counter()
    for epoch in range(1, settings.epochs + 1):
        policy.net.train()
        total = 0.0
        order = rng.permutation(len(train))
        for start in range(0, len(train), settings.batch):
            batch = [train[i] for i in order[start : start + settings.batch]]
            loss = -policy.log_prob(batch).mean()
            opt.zero_grad(set_to_none=True)
            full = loss + settings.value_coef * value_loss(policy, batch) if value_on else loss
            full.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        policy.net.eval()
        held = evaluate(policy, val)
        row = {
            "epoch": epoch,
            "train_loss": round(total / len(train), 5),
            "val_loss": round(held.loss, 5) if val else None,
            "val_accuracy": round(held.accuracy, 5) if val else None,
            **({"val_value": value_calibration(policy, val)} if value_on and val else {}),
            "seconds": round(time.perf_counter() - started, 1),
        }
        curve.append(row)
        val_text = (
            f"held-out loss {held.loss:.4f} accuracy {held.accuracy:.3f}" if val else "no held-out"
        )
        if "val_value" in row:
            value = row["val_value"]
            val_text += f", value mse {value['mse']:.5f} (constant {value['baseline_mse']:.5f})"
        log(
            f"  epoch {epoch}/{settings.epochs}: train loss {row['train_loss']:.4f}, {val_text} "
            f"({row['seconds']:.0f} s)"
        )
    return curve


def report_path(out: str | Path) -> Path:
    """The JSON report beside a checkpoint (``policy.pt`` -> ``policy.json``)."""
    return Path(out).with_suffix(".json")


def pretrain_policy(
    out: str | Path,
    settings: PolicyImitationSettings,
    *,
    log: Callable[[str], None] = print,
    overwrite: bool = False,
    corpora: tuple[Corpus, Corpus] | None = None,
) -> dict[str, Any]:
    """Corpus, training, checkpoint and report (module doc); returns the report.

    ``corpora``: the training and held-out corpora :func:`play_corpora` made for settings of
    the same games (teacher, seats, years, seed, counts), so several networks can be compared
    on one corpus without playing it again."""
    settings.check()
    out = Path(out)
    if out.suffix == ".json":
        raise ValueError(f"--out {out}: the report goes beside it as .json; name a .pt file")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; choose another --out (or --force)")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    started = time.perf_counter()
    train, val = corpora or play_corpora(settings, log)
    config = PolicyConfig(
        hidden=settings.hidden,
        layers=settings.layers,
        attention=settings.attention,
        decoder=settings.decoder,
        value_head=settings.value_coef > 0,
    )
    policy = DiplomacyPolicy(config, seed=settings.seed)
    params = sum(p.numel() for p in policy.trainable_parameters())
    log(f"policy: {params} parameters; {settings.epochs} epochs of batch {settings.batch}")
    train_started = time.perf_counter()
    curve = train_imitation(policy, train.records, val.records, settings, log=log)
    seconds = {
        "corpus": round(train.seconds + val.seconds, 1),
        "train": round(time.perf_counter() - train_started, 1),
    }
    made = _save_policy(out, policy, settings, curve[-1])
    seconds["total"] = round(time.perf_counter() - started, 1)
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        **made,
        "checkpoint": str(out),
        "policy_config": asdict(config),
        "parameters": params,
        "corpus": {"train": train.stats(), "held_out": val.stats()},
        "curve": curve,
        "seconds": seconds,
    }
    atomic_write_json(report_path(out), report)
    accuracy = made["val_accuracy"]
    accuracy_text = "n/a" if accuracy is None else f"{accuracy:.3f}"
    log(f"saved {out} (held-out accuracy {accuracy_text}) in {seconds['total']:.0f} s")
    return report


def play_corpora(settings: PolicyImitationSettings, log: Callable[[str], None]):
    """The training and held-out corpora (games ``0..games`` and the ``val_games`` after them)."""
    teacher_share = f"teacher {settings.teacher}, seats {','.join(settings.seat_bots)}"
    log(f"playing {settings.games} + {settings.val_games} bot games ({teacher_share}) ...")
    last = [time.perf_counter()]

    def game_progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"  games {done}/{total}")

    kwargs = {
        "teacher": settings.teacher,
        "seat_bots": settings.seat_bots,
        "max_years": settings.max_years,
        "seed": settings.seed,
        "progress": game_progress,
    }
    train = collect_corpus(range(settings.games), **kwargs)
    val = collect_corpus(range(settings.games, settings.games + settings.val_games), **kwargs)
    train_stats, val_stats = train.stats(), val.stats()
    log(
        f"corpus: {len(train.records)} training choices, {len(val.records)} held out "
        f"({train_stats['games_per_second']:.2f} games/s; {train.skipped + val.skipped} "
        f"skipped, {train.forced + val.forced} forced; chance accuracy "
        f"{val_stats['uniform_accuracy'] if val.records else train_stats['uniform_accuracy']})"
    )
    return train, val


def _save_policy(
    out: Path, policy: DiplomacyPolicy, settings: PolicyImitationSettings, final: dict[str, Any]
) -> dict[str, Any]:
    """Save the checkpoint with how it was made (its ``pretrain`` record and lineage entry)."""
    made = {
        "kind": REPORT_KIND,
        "teacher": settings.teacher,
        "games": settings.games,
        "val_games": settings.val_games,
        "epochs": settings.epochs,
        "seed": settings.seed,
        "val_accuracy": final["val_accuracy"],
        "val_loss": final["val_loss"],
        "train_loss": final["train_loss"],
        "val_value": final.get("val_value"),
        "command": settings.command(out),
        "settings": _plain(asdict(settings)),
    }
    lineage_entry = {
        "run": None,
        "made_by": "pretrain-policy",
        "init_from": None,
        "step": None,
        "config": made["settings"],
        "teacher": settings.teacher,
        "val_accuracy": final["val_accuracy"],
        "command": made["command"],
    }
    policy.save(out, extra={"pretrain": made, "lineage": [lineage_entry]})
    return made


def _plain(value: Any) -> Any:
    """Tuples as lists (checkpoints are read with ``weights_only``; JSON has no tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
