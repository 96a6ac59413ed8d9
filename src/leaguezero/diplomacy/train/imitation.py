"""Imitation first: pretrain the policy network on a bot's orders
(``leaguezero diplomacy pretrain-policy``).

GRPO from random weights against its own snapshots never finds ``dumb_bot``'s strategy (the
hero stays below parity against six of them), so, as is usual for Diplomacy agents, the policy
is first trained to imitate a strong reference and then fine-tuned with GRPO
(``diplomacy train --init-from CKPT``).

1. **Corpus** (:func:`collect_corpus`): bot games as :func:`~leaguezero.diplomacy.llm.base.pretrain.
   collect_examples` plays them for the LLM base (each seat drawn from ``seat_bots``; game
   ``g`` of seed ``s`` is the same whatever else is played, so the held-out games
   ``games .. games + val_games - 1`` never overlap the training ones). Every phase of every
   seat the *teacher* plays becomes the choices the policy network makes there
   (:class:`~leaguezero.diplomacy.agents.policy.NetActor`): one choice per orderable unit over
   its legal orders (movement, retreat), or the adjustment's sequential picks without
   replacement (a build site used once, ``WAIVE`` open). Each choice is an
   :class:`~leaguezero.diplomacy.train.grpo.ActionRecord` with the policy's own
   :class:`~leaguezero.diplomacy.agents.policy.ChoicePayload` (board features, encoded
   candidates, the index of the teacher's order, temperature 1). A teacher order that is not
   among the candidates (or a unit it left without an order) is skipped and counted; choices
   with a single candidate (nothing to learn) are counted as forced and left out. Builds the
   teacher leaves unused are recorded as ``WAIVE`` picks, which is what the engine does with
   them.
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
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leaguezero.common.atomic import atomic_write_json
from leaguezero.diplomacy.agents.policy import (
    ChoicePayload,
    DiplomacyPolicy,
    PolicyConfig,
    _Board,
    _site,
)
from leaguezero.diplomacy.game.bot_base import WAIVE
from leaguezero.diplomacy.game.catalogue import BOT_NAMES
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv
from leaguezero.diplomacy.game.features import board_features, encode_orders
from leaguezero.diplomacy.game.records import ActionRecord

REPORT_KIND = "leaguezero_diplomacy_pretrain_policy"
REPORT_SCHEMA_VERSION = 1
DEFAULT_SEATS = tuple(reversed(BOT_NAMES))  # every bot, strongest first


@dataclass
class PolicyImitationSettings:
    """Everything that decides a pretrained policy (stored in its checkpoint and report)."""

    teacher: str = "dumb_bot"
    games: int = 200
    max_years: int = 4
    seat_bots: tuple[str, ...] = DEFAULT_SEATS
    epochs: int = 10
    batch: int = 128
    lr: float = 1e-3
    hidden: int = 64
    layers: int = 2
    seed: int = 0
    threads: int = 1  # 0: torch's default
    val_games: int = 20

    def check(self) -> None:
        """Raise ``ValueError`` (one line) for settings that cannot make a policy."""
        from leaguezero.diplomacy.game.bots import BOTS

        bots = ", ".join(sorted(BOTS))
        unknown = sorted({self.teacher, *self.seat_bots} - set(BOTS))
        if unknown:
            raise ValueError(f"unknown bot(s) {', '.join(unknown)}; choose from {bots}")
        if not self.seat_bots:
            raise ValueError(f"--seats names no bot; choose from {bots}")
        if self.teacher not in self.seat_bots:
            raise ValueError(
                f"--teacher {self.teacher} is not one of --seats {','.join(self.seat_bots)}: "
                "the corpus would be empty"
            )
        for name in ("games", "max_years", "epochs", "batch", "hidden", "layers"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be at least 1, got {getattr(self, name)}")
        if self.val_games < 0 or self.threads < 0:
            raise ValueError("--val-games and --threads must not be negative")
        if not self.lr > 0:
            raise ValueError(f"--lr must be positive, got {self.lr}")

    def command(self, out: str | Path) -> str:
        """The command line that makes this policy again."""
        args = [
            "leaguezero diplomacy pretrain-policy",
            f"--out {shlex.quote(str(out))}",
            f"--teacher {self.teacher}",
            f"--games {self.games}",
            f"--max-years {self.max_years}",
            f"--seats {','.join(self.seat_bots)}",
            f"--epochs {self.epochs}",
            f"--batch {self.batch}",
            f"--lr {self.lr:g}",
            f"--hidden {self.hidden}",
            f"--layers {self.layers}",
            f"--seed {self.seed}",
            f"--threads {self.threads}",
            f"--val-games {self.val_games}",
        ]
        return " ".join(args)


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
    from leaguezero.diplomacy.game.rollout import validate_orders

    started = time.perf_counter()
    corpus = Corpus(records=[], orders=[] if keep_orders else None)
    for done, g in enumerate(games, start=1):
        seats, bot_seed = game_plan(seed, g, seat_bots)
        rng = random.Random(bot_seed)
        bots = {p: make_bot(seats[p], seed=rng.getrandbits(32)) for p in POWERS}
        corpus.teacher_seats += sum(bot == teacher for bot in seats.values())
        env = DiplomacyEnv(max_years=max_years)
        while not env.done:
            for power in POWERS:
                legal = env.legal_orders(power)
                if not legal:
                    continue
                raw = list(bots[power].get_orders(env, power) or [])
                if seats[power] == teacher:
                    corpus.teacher_phases += 1
                    _record_phase(corpus, env, power, legal, raw)
                orders, _, _ = validate_orders(env, power, raw, legal)
                env.set_orders(power, orders)
            env.process()
        corpus.games += 1
        if progress is not None:
            progress(done, len(games))
    corpus.seconds = time.perf_counter() - started
    return corpus


def _record_phase(
    corpus: Corpus, env: DiplomacyEnv, power: str, legal: dict[str, list[str]], raw: list[str]
) -> None:
    """The teacher's orders ``raw`` of one phase as the policy's choices (module doc)."""
    board = _Board(torch.from_numpy(board_features(env, power)))
    given = [" ".join(str(order).split()).upper() for order in raw]  # as validate_orders reads
    if env.phase_type == "A":
        owed = env.adjustment_count(power)
        options = list(dict.fromkeys(o for opts in legal.values() for o in opts))
        if owed < 0:
            options = [o for o in options if o.endswith(" D")]
        count = min(abs(owed), len(legal))
        open_orders = list(options)
        picks = 0
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
            picks += 1
            _add_choice(corpus, power, env.phase, board, list(open_orders), order)
            if order != WAIVE:
                site = _site(order)
                open_orders = [o for o in open_orders if _site(o) != site]
        return
    for opts in legal.values():
        allowed = set(opts)
        order = next((o for o in given if o in allowed), None)
        if order is None:
            corpus.skipped += 1
            continue
        _add_choice(corpus, power, env.phase, board, list(opts), order)


def _add_choice(
    corpus: Corpus, power: str, phase: str, board: _Board, options: list[str], order: str
) -> None:
    if len(options) == 1:
        corpus.forced += 1
        return
    payload = ChoicePayload(
        board, torch.from_numpy(encode_orders(options)), options.index(order), 1.0
    )
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
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        policy.net.eval()
        held = evaluate(policy, val)
        row = {
            "epoch": epoch,
            "train_loss": round(total / len(train), 5),
            "val_loss": round(held.loss, 5) if val else None,
            "val_accuracy": round(held.accuracy, 5) if val else None,
            "seconds": round(time.perf_counter() - started, 1),
        }
        curve.append(row)
        val_text = (
            f"held-out loss {held.loss:.4f} accuracy {held.accuracy:.3f}" if val else "no held-out"
        )
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
) -> dict[str, Any]:
    """Corpus, training, checkpoint and report (module doc); returns the report."""
    settings.check()
    out = Path(out)
    if out.suffix == ".json":
        raise ValueError(f"--out {out}: the report goes beside it as .json; name a .pt file")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; choose another --out (or --force)")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    started = time.perf_counter()
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
    config = PolicyConfig(hidden=settings.hidden, layers=settings.layers)
    policy = DiplomacyPolicy(config, seed=settings.seed)
    params = sum(p.numel() for p in policy.trainable_parameters())
    log(f"policy: {params} parameters; {settings.epochs} epochs of batch {settings.batch}")
    train_started = time.perf_counter()
    curve = train_imitation(policy, train.records, val.records, settings, log=log)
    final = curve[-1]
    seconds = {
        "corpus": round(train.seconds + val.seconds, 1),
        "train": round(time.perf_counter() - train_started, 1),
    }
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
    seconds["total"] = round(time.perf_counter() - started, 1)
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        **made,
        "checkpoint": str(out),
        "policy_config": asdict(config),
        "parameters": params,
        "corpus": {"train": train_stats, "held_out": val_stats},
        "curve": curve,
        "seconds": seconds,
    }
    atomic_write_json(report_path(out), report)
    accuracy = final["val_accuracy"]
    accuracy_text = "n/a" if accuracy is None else f"{accuracy:.3f}"
    log(f"saved {out} (held-out accuracy {accuracy_text}) in {seconds['total']:.0f} s")
    return report


def _plain(value: Any) -> Any:
    """Tuples as lists (checkpoints are read with ``weights_only``; JSON has no tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
