"""A small Diplomacy policy network that trains on CPU, and its GRPO/rollout adapters.

**Network** (:class:`PolicyNet`): board features ``x [B, L, F]`` (:mod:`.features`) plus a
learned location embedding go through an input layer and ``layers`` residual graph layers
(``h <- h + relu(W_self h + W_nb (A h))``, ``A`` the row-normalised map adjacency), giving a
board embedding ``h [B, L, H]`` conditioned on the power to play. An order ``(type, src, dst,
aux)`` is scored by an MLP over ``[h_src, h_dst, h_aux, x_src, x_dst, type one-hot]`` (a learned
"none" vector stands in for a missing location); the raw features of source and destination
are fed again so that "this move enters an unowned centre in the fall" is one layer away.

**Choices.** Every decision is a softmax over a candidate set of legal orders:

- movement and retreat phases: one choice per orderable unit over its legal orders;
- adjustment phases: the builds (or disbands) owed are picked one at a time without
  replacement, each pick a softmax over the orders still open (a build site is used once;
  ``WAIVE`` stays open), so a power never gives more builds or disbands than it owes.

Each choice is one :class:`~leaguezero.diplomacy.train.grpo.ActionRecord`, whose payload keeps the
board features and the candidate encodings so :meth:`DiplomacyPolicy.log_prob` can recompute
it with gradients. Sampling divides logits by the temperature, and so does ``log_prob`` (the
payload stores it), so PPO ratios compare like with like.

**Checkpoints** are ``torch.save`` dicts written atomically: ``format``, ``schema_version``,
``feature_schema_id``, the network config, the weights, their ``checksum`` (sha256 over each
tensor's name, dtype, shape and bytes: :func:`leaguezero.az.checkpoint.state_checksum`, as
Yatzy's) and, from a training run, ``extra``: its step and lineage
(:mod:`leaguezero.diplomacy.train.lineage`). :func:`load_policy` checks the first three and the
checksum (a file written before checksums has none and is read unchecked), so a damaged file is
a one-line :class:`CheckpointError`, never a silently different policy.
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from leaguezero.az.checkpoint import state_checksum, torch_load_reason
from leaguezero.common.atomic import atomic_write_bytes
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.features import (
    FEATURE_SCHEMA_ID,
    NONE_LOC,
    NUM_FEATURES,
    ORDER_TYPES,
    adjacency,
    board_features,
    encode_orders,
)
from leaguezero.diplomacy.game.records import ActionRecord

CHECKPOINT_FORMAT = "leaguezero.diplomacy.agents.policy"
CHECKPOINT_SCHEMA_VERSION = 1


class CheckpointError(ValueError):
    """A policy checkpoint that is missing, unreadable, or of another format/version/schema."""


@dataclass(frozen=True)
class PolicyConfig:
    """Network sizes (stored in every checkpoint)."""

    hidden: int = 64
    layers: int = 2
    loc_embedding: int = 16


class PolicyNet(nn.Module):
    """Board features -> per-location embeddings -> a score for each candidate order."""

    def __init__(self, config: PolicyConfig = PolicyConfig()) -> None:
        super().__init__()
        self.config = config
        num_locs = NONE_LOC
        hidden = config.hidden
        self.register_buffer("adjacency", torch.from_numpy(adjacency()), persistent=False)
        self.loc_embedding = nn.Embedding(num_locs, config.loc_embedding)
        self.input = nn.Linear(NUM_FEATURES + config.loc_embedding, hidden)
        self.self_layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(config.layers))
        self.neighbour_layers = nn.ModuleList(
            nn.Linear(hidden, hidden, bias=False) for _ in range(config.layers)
        )
        self.none_loc = nn.Parameter(torch.zeros(hidden))
        order_in = 3 * hidden + 2 * NUM_FEATURES + len(ORDER_TYPES)
        self.order_hidden = nn.Linear(order_in, hidden)
        self.order_out = nn.Linear(hidden, 1)
        # A near-zero last layer makes the initial policy close to uniform over legal orders
        # (about random_bot), a neutral starting point for the league's base_model.
        nn.init.normal_(self.order_out.weight, std=1e-3)
        nn.init.zeros_(self.order_out.bias)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, F]`` -> ``(h [B, L+1, H], x_pad [B, L+1, F])``; row L is the "none" slot."""
        batch = x.shape[0]
        loc = self.loc_embedding.weight.unsqueeze(0).expand(batch, -1, -1)  # [B, L, E]
        h = torch.relu(self.input(torch.cat([x, loc], dim=-1)))  # [B, L, H]
        for self_layer, nb_layer in zip(self.self_layers, self.neighbour_layers, strict=True):
            h = h + torch.relu(self_layer(h) + nb_layer(self.adjacency @ h))
        none = self.none_loc.expand(batch, 1, -1)
        x_pad = torch.cat([x, x.new_zeros(batch, 1, x.shape[-1])], dim=1)
        return torch.cat([h, none], dim=1), x_pad

    def score(
        self, h: torch.Tensor, x_pad: torch.Tensor, board: torch.Tensor, cand: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[K]`` of candidate orders ``cand [K, 4]`` (type, src, dst, aux) on boards
        ``board [K]`` (rows of ``h [B, L+1, H]`` / ``x_pad [B, L+1, F]``)."""
        kind, src, dst, aux = cand.unbind(dim=1)
        parts = [
            h[board, src],
            h[board, dst],
            h[board, aux],
            x_pad[board, src],
            x_pad[board, dst],
            nn.functional.one_hot(kind, len(ORDER_TYPES)).to(h.dtype),
        ]
        hidden = torch.relu(self.order_hidden(torch.cat(parts, dim=-1)))
        return self.order_out(hidden).squeeze(-1)


@dataclass
class _Board:
    """Board features shared by all choices of one phase (deduplicated by identity)."""

    x: torch.Tensor  # [L, F] float32


@dataclass
class ChoicePayload:
    """What :meth:`DiplomacyPolicy.log_prob` needs to rescore one choice."""

    board: _Board
    cand: torch.Tensor  # [K, 4] int64 encoded candidate orders
    chosen: int  # index into cand
    temperature: float


class NetActor:
    """A seat player for one game: samples orders and records each choice (``records``)."""

    def __init__(self, policy: DiplomacyPolicy, seed: int, temperature: float, greedy: bool):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.temperature = temperature
        self.greedy = greedy
        self.records: list[ActionRecord] = []

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders for ``power`` now (only legal ones; see the module doc for the choices)."""
        legal = env.legal_orders(power)
        if not legal:
            return []
        board = _Board(torch.from_numpy(board_features(env, power)))
        if env.phase_type == "A":
            owed = env.adjustment_count(power)
            options = [o for opts in legal.values() for o in opts]
            options = list(dict.fromkeys(options))  # WAIVE is listed at every site
            if owed < 0:
                options = [o for o in options if o.endswith(" D")]
            count = min(abs(owed), len(legal))
            logits = self._logits(board, options)
            return self._pick_sequential(env, power, board, options, logits, count)
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
    def _logits(self, board: _Board, options: list[str]) -> np.ndarray:
        cand = torch.from_numpy(encode_orders(options))
        with torch.no_grad():
            h, x_pad = self.policy.net.encode(board.x.unsqueeze(0))
            scores = self.policy.net.score(
                h, x_pad, torch.zeros(len(options), dtype=torch.long), cand
            )
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
        board: _Board,
        options: list[str],
        logits: np.ndarray,
        chosen: int,
    ) -> None:
        log_norm = logits.max() + math.log(np.exp(logits - logits.max()).sum())
        payload = ChoicePayload(
            board, torch.from_numpy(encode_orders(options)), chosen, self.temperature
        )
        self.records.append(
            ActionRecord(power, env.phase, float(logits[chosen] - log_norm), payload)
        )

    def _pick_sequential(
        self,
        env: DiplomacyEnv,
        power: str,
        board: _Board,
        options: list[str],
        logits: np.ndarray,
        count: int,
    ) -> list[str]:
        open_idx = list(range(len(options)))
        picked: list[str] = []
        for _ in range(count):
            if not open_idx:
                break
            sub = logits[open_idx]
            j = self._choose(sub)
            order = options[open_idx[j]]
            self._record(env, power, board, [options[i] for i in open_idx], sub, j)
            picked.append(order)
            if order != "WAIVE":  # a site (or unit) is used once; WAIVE stays available
                site = _site(order)
                open_idx = [i for i in open_idx if _site(options[i]) != site]
        return picked


def _site(order: str) -> str:
    """The province an adjustment order uses ("A STP B" and "F STP/SC B" share STP)."""
    parts = order.split()
    return parts[1][:3] if len(parts) > 1 else ""


class DiplomacyPolicy:
    """The small CPU hero: a :class:`PolicyNet` with the GRPO interface and ``get_orders``.

    Implements :class:`~leaguezero.diplomacy.train.grpo.GRPOPolicy` (``actor``, ``log_prob``,
    ``trainable_parameters``, ``record_size``, ``save``, ``load``) and the rollout's ``Policy``
    (``get_orders``, sampling at ``temperature`` with a fixed seed, or argmax when ``greedy``).
    """

    def __init__(
        self,
        config: PolicyConfig = PolicyConfig(),
        *,
        seed: int = 0,
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> None:
        with torch.random.fork_rng(devices=[]):  # seeded weights without touching global RNG
            torch.manual_seed(seed)
            self.net = PolicyNet(config)
        self.config = config
        self._default_actor = NetActor(self, seed, temperature, greedy)

    # ----- rollout Policy -------------------------------------------------------------------
    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        """Orders from the default actor (its records are discarded as they come)."""
        orders = self._default_actor.get_orders(env, power)
        self._default_actor.records.clear()
        return orders

    # ----- GRPOPolicy -----------------------------------------------------------------------
    def actor(self, *, seed: int, temperature: float = 1.0, greedy: bool = False) -> NetActor:
        return NetActor(self, seed, temperature, greedy)

    # Sampling and training share this network's forward pass: the sampled log-probs are exact.
    recompute_old_log_probs = False

    @staticmethod
    def record_size(record: ActionRecord) -> int:
        """Every record is one unit's choice: one size, so passes keep the sampling order."""
        return 1

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.net.parameters())

    def log_prob(self, records: Sequence[ActionRecord]) -> torch.Tensor:
        """``[N]`` log-probabilities of the recorded choices under the current weights."""
        if not records:
            return torch.zeros(0)
        log_probs, chosen = self.candidate_log_probs(records)
        return log_probs.gather(1, chosen.unsqueeze(1)).squeeze(1)

    def token_log_probs(self, records: Sequence[ActionRecord]) -> list[torch.Tensor]:
        """Each record as a one-token row (a record is one unit's choice)."""
        return list(self.log_prob(records)[:, None].unbind(0)) if records else []

    def candidate_log_probs(
        self, records: Sequence[ActionRecord]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every candidate's log-probability, batched: ``([N, Kmax], chosen [N])``.

        Row ``i`` holds the log-softmax over record ``i``'s candidates (at its temperature),
        ``-inf`` past its ``K``; ``chosen[i]`` is the index of the recorded choice. One pass
        encodes each distinct board once and scores all candidates together (what
        :meth:`log_prob` gathers from, and what imitation training reads accuracy from).
        """
        boards: dict[int, int] = {}
        xs: list[torch.Tensor] = []
        cands, board_idx, rec_idx, pos = [], [], [], []
        chosen = torch.empty(len(records), dtype=torch.long)
        temps = torch.empty(len(records))
        for i, record in enumerate(records):
            payload: ChoicePayload = record.payload
            b = boards.setdefault(id(payload.board), len(xs))
            if b == len(xs):
                xs.append(payload.board.x)
            k = payload.cand.shape[0]
            cands.append(payload.cand)
            board_idx.append(torch.full((k,), b, dtype=torch.long))
            rec_idx.append(torch.full((k,), i, dtype=torch.long))
            pos.append(torch.arange(k))
            chosen[i] = payload.chosen
            temps[i] = payload.temperature
        h, x_pad = self.net.encode(torch.stack(xs))  # [B, L+1, H], [B, L+1, F]
        rec = torch.cat(rec_idx)
        position = torch.cat(pos)
        scores = self.net.score(h, x_pad, torch.cat(board_idx), torch.cat(cands)) / temps[rec]
        width = int(position.max()) + 1
        padded = scores.new_full((len(records), width), float("-inf"))
        padded = padded.index_put((rec, position), scores)
        return torch.log_softmax(padded, dim=1), chosen  # [N, Kmax], [N]

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write a checkpoint atomically (module doc) and return its path; ``extra`` (plain
        values: the run's step and lineage) is stored alongside and ignored by the loaders."""
        path = Path(path)
        buffer = io.BytesIO()
        state = {k: v.detach().to("cpu") for k, v in self.net.state_dict().items()}
        torch.save(
            {
                "format": CHECKPOINT_FORMAT,
                "schema_version": CHECKPOINT_SCHEMA_VERSION,
                "feature_schema_id": FEATURE_SCHEMA_ID,
                "config": asdict(self.config),
                "state_dict": state,
                "checksum": state_checksum(state),
                **({"extra": extra} if extra else {}),
            },
            buffer,
        )
        atomic_write_bytes(path, buffer.getvalue())
        return path

    def load(self, path: str | Path) -> None:
        """Replace the weights with a checkpoint's; raises :class:`CheckpointError`."""
        data = _read_checkpoint(path)
        if PolicyConfig(**data["config"]) != self.config:
            raise CheckpointError(
                f"checkpoint {path} has network config {data['config']}, this policy has "
                f"{asdict(self.config)}; build the policy with load_policy()"
            )
        self.net.load_state_dict(data["state_dict"])

    def copy(self) -> DiplomacyPolicy:
        """An independent deep copy (e.g. a frozen reference)."""
        return copy.deepcopy(self)


# The sizes a checkpoint may ask for: a damaged or hostile config must not allocate gigabytes.
_CONFIG_BOUNDS = {"hidden": 4096, "layers": 64, "loc_embedding": 1024}


def _read_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"policy checkpoint {path} does not exist")
    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointError(f"policy checkpoint {path} is unreadable (an empty file)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a truncated or foreign file
        reason = torch_load_reason(err)
        raise CheckpointError(f"policy checkpoint {path} is unreadable ({reason})") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a leaguezero Diplomacy policy checkpoint")
    if data.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
        raise CheckpointError(
            f"policy checkpoint {path} has schema_version {data.get('schema_version')!r}, this "
            f"leaguezero reads {CHECKPOINT_SCHEMA_VERSION}"
        )
    if data.get("feature_schema_id") != FEATURE_SCHEMA_ID:
        raise CheckpointError(
            f"policy checkpoint {path} uses features {data.get('feature_schema_id')!r}, this "
            f"leaguezero computes {FEATURE_SCHEMA_ID!r}"
        )
    config = data.get("config")
    if not isinstance(config, dict) or not all(
        isinstance(config.get(name), int) and 1 <= config[name] <= bound
        for name, bound in _CONFIG_BOUNDS.items()
    ):
        shown = (
            {k: str(v)[:20] for k, v in list(config.items())[:5]}
            if isinstance(config, dict)
            else None
        )
        raise CheckpointError(
            f"policy checkpoint {path} has a network config outside this leaguezero's bounds "
            f"({shown}; at most {_CONFIG_BOUNDS}); use another checkpoint"
        )
    state, checksum = data.get("state_dict"), data.get("checksum")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"policy checkpoint {path} has no state_dict of tensors")
    if checksum is not None and checksum != state_checksum(state):
        raise CheckpointError(
            f"policy checkpoint {path} is damaged: its weights do not match the checksum it "
            "carries; use another checkpoint (e.g. an earlier one of the run)"
        )
    return data


def load_policy(
    path: str | Path, *, seed: int = 0, temperature: float = 1.0, greedy: bool = False
) -> DiplomacyPolicy:
    """A policy built from a checkpoint's own config and weights (raises CheckpointError)."""
    data = _read_checkpoint(path)
    try:
        policy = DiplomacyPolicy(
            PolicyConfig(**data["config"]), seed=seed, temperature=temperature, greedy=greedy
        )
        policy.net.load_state_dict(data["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"policy checkpoint {path} does not hold a usable policy ({first})"
        ) from None
    return policy
