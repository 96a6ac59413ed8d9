"""A small Diplomacy policy network that trains on CPU, and its GRPO/rollout adapters.

**Network** (:class:`PolicyNet`): board features ``x [B, L, F]``
(:mod:`~leaguezero.diplomacy.game.features`) plus a learned location embedding go through an input
layer and ``layers`` residual graph layers (``h <- h + relu(W_self h + W_nb (A h))``, ``A`` the
row-normalised map adjacency), giving a board embedding ``h [B, L, H]`` conditioned on the power to
play. An order ``(type, src, dst, aux)`` is scored by an MLP over
``[h_src, h_dst, h_aux, x_src, x_dst, type one-hot]`` (a learned "none" vector stands in for a
missing location); the raw features of source and destination are fed again so that "this move
enters an unowned centre in the fall" is one layer away. ``PolicyConfig.decoder``: ``independent``
scores each unit's orders from the board alone; ``sequential`` also conditions unit k's order on the
orders 1..k-1 the power already chose this phase (:mod:`.decoder`). ``PolicyConfig.value_head`` adds
a head predicting the power's share of the final score (:mod:`.value`). ``PolicyConfig.attention``
(heads; 0: none) adds, after the graph layers, one residual self-attention layer over the map's
locations (``h <- h + MHA(LN(h))``), so every location sees the whole board in one step where
the graph layers see ``layers`` hops.

**Choices.** Every decision is a softmax over a candidate set of legal orders:

- movement and retreat phases: one choice per orderable unit over its legal orders;
- adjustment phases: the builds (or disbands) owed are picked one at a time without
  replacement, each pick a softmax over the orders still open (a build site is used once;
  ``WAIVE`` stays open), so a power never gives more builds or disbands than it owes.

Each choice (:class:`~.actor.NetActor`, the seat player) is one
:class:`~leaguezero.diplomacy.game.records.ActionRecord`, whose payload keeps the
board features and the candidate encodings so :meth:`DiplomacyPolicy.log_prob` can recompute
it with gradients. Sampling divides logits by the temperature, and so does ``log_prob`` (the
payload stores it), so PPO ratios compare like with like.

**Checkpoints** (:mod:`.checkpoint`: schema versions, and what is refused) are ``torch.save``
dicts written atomically: ``format``, ``schema_version``,
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from leaguezero.az.checkpoint import state_checksum
from leaguezero.common.atomic import atomic_write_bytes
from leaguezero.diplomacy.agents.actor import ChoicePayload, NetActor, PhaseBoard
from leaguezero.diplomacy.agents.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_SCHEMA_VERSION,
    DECODERS,
    CheckpointError,
    read_checkpoint,
)
from leaguezero.diplomacy.agents.decoder import OrderConditioner
from leaguezero.diplomacy.agents.value import ValueHead
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.features import (
    FEATURE_SCHEMA_ID,
    NONE_LOC,
    NUM_FEATURES,
    ORDER_TYPES,
    adjacency,
)
from leaguezero.diplomacy.game.records import ActionRecord


@dataclass(frozen=True)
class PolicyConfig:
    """The network's shape (stored in every checkpoint; the defaults are schema 1's net)."""

    hidden: int = 64
    layers: int = 2
    loc_embedding: int = 16
    decoder: str = "independent"  # or "sequential": order k given orders 1..k-1 (.decoder)
    value_head: bool = False  # predict the power's final score share (.value)
    attention: int = 0  # heads of a self-attention layer over locations (0: none; schema 3)

    def __post_init__(self) -> None:
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, not {self.decoder!r}")
        if self.attention < 0 or (self.attention and self.hidden % self.attention):
            raise ValueError(
                f"attention must be 0 or a divisor of hidden {self.hidden}, not {self.attention}"
            )

    def stored(self) -> tuple[int, dict]:
        """The checkpoint schema and config dict this network is written as: the lowest
        schema that describes it (a net without attention stays readable by schema-2 readers)."""
        config = asdict(self)
        if not self.attention:
            del config["attention"]
            return 2, config
        return CHECKPOINT_SCHEMA_VERSION, config


class UnitAttention(nn.Module):
    """One pre-norm residual self-attention layer over the board's locations ``h [B, L, H]``."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)
        return h + self.attn(x, x, x, need_weights=False)[0]


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
        # Built after the schema-1 layers, so an independent net without a value head draws
        # the same initial weights from a seed as before.
        sequential = config.decoder == "sequential"
        self.conditioner = OrderConditioner(len(ORDER_TYPES), hidden) if sequential else None
        self.value_head = ValueHead(hidden) if config.value_head else None
        self.attention = UnitAttention(hidden, config.attention) if config.attention else None

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, F]`` -> ``(h [B, L+1, H], x_pad [B, L+1, F])``; row L is the "none" slot."""
        batch = x.shape[0]
        loc = self.loc_embedding.weight.unsqueeze(0).expand(batch, -1, -1)  # [B, L, E]
        h = torch.relu(self.input(torch.cat([x, loc], dim=-1)))  # [B, L, H]
        for self_layer, nb_layer in zip(self.self_layers, self.neighbour_layers, strict=True):
            h = h + torch.relu(self_layer(h) + nb_layer(self.adjacency @ h))
        if self.attention is not None:
            h = self.attention(h)
        none = self.none_loc.expand(batch, 1, -1)
        x_pad = torch.cat([x, x.new_zeros(batch, 1, x.shape[-1])], dim=1)
        return torch.cat([h, none], dim=1), x_pad

    def score(
        self,
        h: torch.Tensor,
        x_pad: torch.Tensor,
        board: torch.Tensor,
        cand: torch.Tensor,
        cond: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores ``[K]`` of candidate orders ``cand [K, 4]`` (type, src, dst, aux) on boards
        ``board [K]`` (rows of ``h [B, L+1, H]`` / ``x_pad [B, L+1, F]``); ``cond [K, 3, H]``:
        the sequential decoder's terms at src, dst, aux (:mod:`.decoder`), None: none."""
        kind, src, dst, aux = cand.unbind(dim=1)
        at = [h[board, src], h[board, dst], h[board, aux]]
        if cond is not None:
            at = [at[role] + cond[:, role] for role in range(3)]
        parts = [
            *at,
            x_pad[board, src],
            x_pad[board, dst],
            nn.functional.one_hot(kind, len(ORDER_TYPES)).to(h.dtype),
        ]
        hidden = torch.relu(self.order_hidden(torch.cat(parts, dim=-1)))
        return self.order_out(hidden).squeeze(-1)


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
        cands, board_idx, rec_idx, pos, priors = [], [], [], [], []
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
            priors.append(payload.prior)
        h, x_pad = self.net.encode(torch.stack(xs))  # [B, L+1, H], [B, L+1, F]
        rec = torch.cat(rec_idx)
        position = torch.cat(pos)
        cand = torch.cat(cands)
        cond = None
        if self.net.conditioner is not None:  # teacher-forced on each record's earlier orders
            cond = self.net.conditioner.candidate_terms(priors, cand, rec)
        scores = self.net.score(h, x_pad, torch.cat(board_idx), cand, cond) / temps[rec]
        width = int(position.max()) + 1
        padded = scores.new_full((len(records), width), float("-inf"))
        padded = padded.index_put((rec, position), scores)
        return torch.log_softmax(padded, dim=1), chosen  # [N, Kmax], [N]

    def values(self, boards: Sequence[PhaseBoard]) -> torch.Tensor:
        """``[N]`` predicted final score shares of the boards' powers to play (with gradients;
        :mod:`.value`). Raises ``ValueError`` for a network without a value head."""
        if self.net.value_head is None:
            raise ValueError("this policy has no value head (PolicyConfig.value_head)")
        h, _ = self.net.encode(torch.stack([b.x for b in boards]))
        return self.net.value_head(h)

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write a checkpoint atomically (module doc) and return its path; ``extra`` (plain
        values: the run's step and lineage) is stored alongside and ignored by the loaders."""
        path = Path(path)
        buffer = io.BytesIO()
        state = {k: v.detach().to("cpu") for k, v in self.net.state_dict().items()}
        schema, config = self.config.stored()
        torch.save(
            {
                "format": CHECKPOINT_FORMAT,
                "schema_version": schema,
                "feature_schema_id": FEATURE_SCHEMA_ID,
                "config": config,
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
        data = read_checkpoint(path)
        if PolicyConfig(**data["config"]) != self.config:
            raise CheckpointError(
                f"checkpoint {path} has network config {data['config']}, this policy has "
                f"{asdict(self.config)}; build the policy with load_policy()"
            )
        self.net.load_state_dict(data["state_dict"])

    def copy(self) -> DiplomacyPolicy:
        """An independent deep copy (e.g. a frozen reference)."""
        return copy.deepcopy(self)


def load_policy(
    path: str | Path, *, seed: int = 0, temperature: float = 1.0, greedy: bool = False
) -> DiplomacyPolicy:
    """A policy built from a checkpoint's own config and weights (raises CheckpointError)."""
    data = read_checkpoint(path)
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
