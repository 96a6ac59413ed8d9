"""Ranking mode: the model scores each unit's legal orders instead of writing them freely.

Free generation can write an order that is not legal (counted invalid, the unit holds).
In ranking mode (``llm.mode: rank``) every order is legal by construction: for each orderable
location, in the prompt's (sorted) order, each legal option is scored by the model as the next
line of the answer, ``log p(option + "\\n" | prompt, orders chosen so far)`` (the sum of its
tokens' raw log-probs), and the option is picked by ``argmax`` (temperature 0) or sampled from
``softmax(score / temperature)``. In an adjustment phase the owed builds or disbands are picked
one at a time over all sites (``WAIVE`` included), each site at most once; then ``END``.

It costs one scoring pass per location (all its options as one batch), so it suits evaluation
and play; GRPO trains the free-generation policy (its log-probs are of sampled tokens). It needs
the in-process hf backend (scoring with arbitrary continuations), not an OpenAI server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from leaguezero.diplomacy.llm.model.sampler import sample_index
from leaguezero.diplomacy.llm.orders.prompt import END_MARK, WAIVE


def rank_orders(
    backend,
    prompt: str,
    legal: Mapping[str, Sequence[str]],
    *,
    adapter: str | None,
    phase_type: str,
    owed: int | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[list[str], str]:
    """Orders picked by the model's scores (see module doc) and the answer text they make.

    ``backend``: an :class:`~leaguezero.diplomacy.llm.model.hf_backend.HFBackend`; ``prompt``: the
    rendered prompt (chat template applied); ``owed``: builds/disbands owed in an adjustment phase.
    """
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    tokenizer = backend.tokenizer
    chosen: list[str] = []

    def scores_of(options: Sequence[str]) -> torch.Tensor:
        prefix = prompt + "".join(f"{o}\n" for o in chosen)
        ids = [tokenizer(f"{o}\n", add_special_tokens=False)["input_ids"] for o in options]
        with torch.no_grad():
            per_token = backend.logprobs([prefix] * len(options), ids, adapter)
        return torch.stack([t.sum() for t in per_token]).float()

    if phase_type == "A":
        sites = {loc: list(options) for loc, options in legal.items()}
        for _ in range(min(owed or 0, len(sites))):
            options = [(loc, o) for loc, opts in sites.items() for o in opts]
            if not options:
                break
            pick = sample_index(scores_of([o for _, o in options]), temperature, gen)
            loc, order = options[pick]
            chosen.append(order)
            if order == WAIVE:
                continue  # a waived build leaves the sites open
            sites.pop(loc)
    else:
        for loc in sorted(legal):
            options = list(legal[loc])
            if options:
                chosen.append(options[sample_index(scores_of(options), temperature, gen)])
    return chosen, "\n".join([*chosen, END_MARK])
