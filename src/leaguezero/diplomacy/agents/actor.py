"""The network's seat player (:class:`NetActor`): it samples a power's orders choice by choice
and keeps each choice as an :class:`~leaguezero.diplomacy.game.records.ActionRecord` whose
:class:`ChoicePayload` lets :meth:`~.policy.DiplomacyPolicy.log_prob` score it again (the
choices are listed in :mod:`.policy`'s module doc; the sequential decoder's in :mod:`.decoder`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from leaguezero.diplomacy.agents.decoder import decode_order
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.features import board_features, encode_orders
from leaguezero.diplomacy.game.records import ActionRecord


class ActorPolicy(Protocol):
    """What an actor asks of its policy (:class:`~.policy.DiplomacyPolicy` is one): the network
    it runs (its ``conditioner`` is None for the independent decoder)."""

    net: Any


@dataclass
class PhaseBoard:
    """Board features shared by all choices of one phase (deduplicated by identity)."""

    x: torch.Tensor  # [L, F] float32
    # The power's realised final score share (imitation's value target; None: not known).
    share: float | None = None


@dataclass
class ChoicePayload:
    """What :meth:`~.policy.DiplomacyPolicy.log_prob` needs to rescore one choice."""

    board: PhaseBoard
    cand: torch.Tensor  # [K, 4] int64 encoded candidate orders
    chosen: int  # index into cand
    temperature: float
    # [P, 4] int64: the power's orders chosen before this one in the phase (the sequential
    # decoder's condition; read only by the sequential decoder).
    prior: torch.Tensor | None = None


class NetActor:
    """A seat player for one game: samples orders and records each choice (``records``)."""

    def __init__(self, policy: ActorPolicy, seed: int, temperature: float, greedy: bool):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.temperature = temperature
        self.greedy = greedy
        self.records: list[ActionRecord] = []
        self._encoded: tuple[PhaseBoard, torch.Tensor, torch.Tensor] | None = None

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders for ``power`` now (only legal ones; see the module doc for the choices)."""
        legal = env.legal_orders(power)
        if not legal:
            return []
        board = PhaseBoard(torch.from_numpy(board_features(env, power)))
        if env.phase_type == "A":
            owed = env.adjustment_count(power)
            options = [o for opts in legal.values() for o in opts]
            options = list(dict.fromkeys(options))  # WAIVE is listed at every site
            if owed < 0:
                options = [o for o in options if o.endswith(" D")]
            count = min(abs(owed), len(legal))
            logits = self._logits(board, options)
            return self._pick_sequential(env, power, board, options, logits, count)
        if self.policy.net.conditioner is not None:
            return self._decode_in_sequence(env, power, board, legal)
        orders = []
        flat = [o for opts in legal.values() for o in opts]
        logits = self._logits(board, flat)
        start = 0
        for opts in legal.values():
            part = logits[start : start + len(opts)]
            start += len(opts)
            j = self._choose(part)
            self._record(env, power, board, opts, part, j)
            orders.append(opts[j])
        return orders

    # ----- internals ------------------------------------------------------------------------
    def _decode_in_sequence(
        self, env: DiplomacyEnv, power: str, board: PhaseBoard, legal: dict[str, list[str]]
    ) -> list[str]:
        """The sequential decoder: each unit's order given those chosen before it."""
        orders: list[str] = []
        for loc in decode_order(legal):
            opts = legal[loc]
            prior = _encoded(orders)
            logits = self._logits(board, opts, prior)
            j = self._choose(logits)
            self._record(env, power, board, opts, logits, j, prior)
            orders.append(opts[j])
        return orders

    def _logits(
        self, board: PhaseBoard, options: list[str], prior: torch.Tensor | None = None
    ) -> np.ndarray:
        net = self.policy.net
        cand = torch.from_numpy(encode_orders(options))
        owner = torch.zeros(len(options), dtype=torch.long)
        with torch.no_grad():
            if self._encoded is None or self._encoded[0] is not board:
                self._encoded = (board, *net.encode(board.x.unsqueeze(0)))
            _, h, x_pad = self._encoded
            cond = None
            if net.conditioner is not None:
                cond = net.conditioner.candidate_terms([prior], cand, owner)
            scores = net.score(h, x_pad, owner, cand, cond)
        return scores.double().numpy() / self.temperature

    def _choose(self, logits: np.ndarray) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        probs = np.exp(logits - logits.max())
        return int(self.rng.choice(len(logits), p=probs / probs.sum()))

    def _record(
        self,
        env: DiplomacyEnv,
        power: str,
        board: PhaseBoard,
        options: list[str],
        logits: np.ndarray,
        chosen: int,
        prior: torch.Tensor | None = None,
    ) -> None:
        log_norm = logits.max() + math.log(np.exp(logits - logits.max()).sum())
        cand = torch.from_numpy(encode_orders(options))
        payload = ChoicePayload(board, cand, chosen, self.temperature, prior)
        self.records.append(
            ActionRecord(power, env.phase, float(logits[chosen] - log_norm), payload)
        )

    def _pick_sequential(
        self,
        env: DiplomacyEnv,
        power: str,
        board: PhaseBoard,
        options: list[str],
        logits: np.ndarray,
        count: int,
    ) -> list[str]:
        open_idx = list(range(len(options)))
        picked: list[str] = []
        sequential = self.policy.net.conditioner is not None
        for _ in range(count):
            if not open_idx:
                break
            open_orders = [options[i] for i in open_idx]
            prior = _encoded(picked) if sequential else None
            sub = self._logits(board, open_orders, prior) if sequential else logits[open_idx]
            j = self._choose(sub)
            order = options[open_idx[j]]
            self._record(env, power, board, open_orders, sub, j, prior)
            picked.append(order)
            if order != "WAIVE":  # a site (or unit) is used once; WAIVE stays available
                site = order_site(order)
                open_idx = [i for i in open_idx if order_site(options[i]) != site]
        return picked


def _encoded(orders: list[str]) -> torch.Tensor:
    """``[P, 4]`` int64 encodings of a phase's orders chosen so far (the decoder's prior)."""
    return torch.from_numpy(encode_orders(orders))


def order_site(order: str) -> str:
    """The province an adjustment order uses ("A STP B" and "F STP/SC B" share STP)."""
    parts = order.split()
    return parts[1][:3] if len(parts) > 1 else ""
