"""The settings of ``leaguezero diplomacy pretrain-policy`` (:mod:`.imitation`): one typed value
built where the command starts, checked there, and stored in the checkpoint and report it
makes (with the command line that makes it again)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from leaguezero.diplomacy.agents.checkpoint import DECODERS
from leaguezero.diplomacy.game.catalogue import BOT_NAMES, BOTS_STRONGEST_FIRST, is_bot

DEFAULT_SEATS = BOTS_STRONGEST_FIRST  # every bot, strongest first


@dataclass
class PolicyImitationSettings:
    """Everything that decides a pretrained policy (stored in its checkpoint and report).

    ``decoder``: ``independent`` or ``sequential`` (teacher-forced on the teacher's earlier
    orders of the phase, :mod:`leaguezero.diplomacy.agents.decoder`); ``value_coef``: the
    weight of the value head's MSE on the games' final score shares beside the cross-entropy
    (0: no value head, :mod:`leaguezero.diplomacy.agents.value`).
    """

    teacher: str = "dumb_bot"
    games: int = 200
    max_years: int = 4
    seat_bots: tuple[str, ...] = DEFAULT_SEATS
    epochs: int = 10
    batch: int = 128
    lr: float = 1e-3
    hidden: int = 64
    layers: int = 2
    attention: int = 0  # heads of attention over locations (0: none)
    seed: int = 0
    threads: int = 1  # 0: torch's default
    val_games: int = 20
    decoder: str = "independent"
    value_coef: float = 0.0

    def check(self) -> None:
        """Raise ``ValueError`` (one line) for settings that cannot make a policy."""
        bots = ", ".join(sorted(BOT_NAMES))
        unknown = sorted(name for name in {self.teacher, *self.seat_bots} if not is_bot(name))
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
        if self.attention < 0 or (self.attention and self.hidden % self.attention):
            raise ValueError(
                f"--attention must be 0 or a divisor of --hidden {self.hidden}, got "
                f"{self.attention}"
            )
        if self.val_games < 0 or self.threads < 0:
            raise ValueError("--val-games and --threads must not be negative")
        if not self.lr > 0:
            raise ValueError(f"--lr must be positive, got {self.lr}")
        if self.decoder not in DECODERS:
            raise ValueError(f"--decoder must be one of {', '.join(DECODERS)}, not {self.decoder}")
        if not self.value_coef >= 0:
            raise ValueError(f"--value-coef must be >= 0 (0: no value head), got {self.value_coef}")

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
            *([f"--attention {self.attention}"] if self.attention else []),
            f"--seed {self.seed}",
            f"--threads {self.threads}",
            f"--val-games {self.val_games}",
        ]
        if self.decoder != "independent":
            args.append(f"--decoder {self.decoder}")
        if self.value_coef:
            args.append(f"--value-coef {self.value_coef:g}")
        return " ".join(args)
