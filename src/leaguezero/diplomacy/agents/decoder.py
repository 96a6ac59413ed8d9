"""Orders decoded in sequence: what a power's earlier orders of a phase tell the next one.

With ``PolicyConfig.decoder == "sequential"`` a power's units are ordered in a fixed order
(:func:`decode_order`: by location name) and unit k's order is scored given the orders
1..k-1 already chosen this phase (in an adjustment phase: the picks already made). Each
chosen order ``(type, src, dst, aux)`` writes a learned vector at each location it names,
one table per role (``at_src[type]`` at src, ``at_dst[type]`` at dst, ``at_aux[type]`` at
aux), and those vectors, gated by the candidate's own type, are added to the board embedding
the order scorer reads at a candidate's src, dst and aux
(:meth:`OrderConditioner.candidate_terms`). So a candidate support ``A MAR S A PAR - BUR``
reads, at BUR and PAR, that ``A PAR - BUR`` was ordered; a move into a province another unit
of the power already moves into reads that too. The joint
order's probability is the product of the steps', so its log-prob is their sum (what GRPO's
ratio and the KL need), and the records stay one per unit.

Why additive terms at the named locations and not a recurrent state: the scorer already
reads the embeddings at those locations, so the conditioning costs one gather per candidate,
no graph layer per step, and sampling (one unit at a time) and training (all of a phase's
units at once, teacher-forced on the recorded earlier orders) run the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from leaguezero.diplomacy.game.features import NONE_LOC


def decode_order(legal: Mapping[str, list[str]]) -> list[str]:
    """The orderable locations of ``legal`` in the sequential decoder's order (by name)."""
    return sorted(legal)


class OrderConditioner(nn.Module):
    """Learned vectors of chosen orders, written at the locations they name (module doc)."""

    def __init__(self, order_types: int, hidden: int) -> None:
        super().__init__()
        self.roles = nn.ModuleList(nn.Embedding(order_types, hidden) for _ in range(3))
        for table in self.roles:
            nn.init.normal_(table.weight, std=hidden**-0.5)
        # What a candidate reads is gated by its own type: an additive term alone shifts the
        # scorer's first layer alike for every candidate reading that location, so a move and
        # a support into BUR would learn "someone moves to BUR" only through the ReLUs.
        self.gate = nn.Embedding(order_types, 3 * hidden)
        nn.init.normal_(self.gate.weight, mean=1.0, std=0.5)

    def candidate_terms(
        self,
        priors: Sequence[torch.Tensor | None],
        cand: torch.Tensor,
        owner: torch.Tensor,
    ) -> torch.Tensor:
        """``[C, 3, H]``: for each candidate ``cand [C, 4]`` (type, src, dst, aux) of choice
        ``owner [C]`` (an index into ``priors``), the sum of the vectors the choice's earlier
        orders ``priors[owner] [P, 4]`` wrote at the candidate's src, dst and aux.

        ``None`` or an empty prior (the first unit of a phase) adds nothing; neither does a
        missing location (``NONE_LOC``), on either side.
        """
        hidden = self.roles[0].embedding_dim
        table = cand.new_zeros((len(priors), NONE_LOC + 1, hidden), dtype=torch.float32)
        kept = [(i, p) for i, p in enumerate(priors) if p is not None and len(p)]
        if kept:
            prior = torch.cat([p for _, p in kept])  # [P, 4]
            by = torch.cat([torch.full((len(p),), i, dtype=torch.long) for i, p in kept])
            for role, embedding in enumerate(self.roles):
                loc = prior[:, 1 + role]
                real = loc != NONE_LOC
                table = table.index_put(
                    (by[real], loc[real]), embedding(prior[real, 0]), accumulate=True
                )
        read = torch.stack([table[owner, cand[:, 1 + role]] for role in range(3)], dim=1)
        return read * self.gate(cand[:, 0]).view(-1, 3, hidden)  # [C, 3, H]
