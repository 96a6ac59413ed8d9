"""The base LM's check: greedy answers to held-out prompts, parsed as the league loop parses
them (:func:`~leaguezero.diplomacy.llm.orders.prompt.extract_orders`); the share of owed orders
that are legal."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from leaguezero.diplomacy.llm.base.corpus import Example
from leaguezero.diplomacy.llm.orders.prompt import extract_orders, render_prompt


@dataclass
class Validity:
    """Greedy answers to held-out prompts, parsed as the league loop parses them."""

    prompts: int
    owed: int  # orders the prompts asked for (orderable locations; builds/disbands owed)
    valid: int  # legal orders given
    invalid: int  # order-like lines that were not legal (or a location twice)
    missing: int  # owed orders not given
    exact: int  # answers equal to the bot's

    @property
    def valid_rate(self) -> float:
        """Legal orders given / orders owed (invalid and missing both count against it)."""
        return self.valid / max(1, self.owed)


def order_validity(
    backend,
    examples: Sequence[Example],
    *,
    max_new_tokens: int = 160,
    batch: int = 16,
    adapter: str | None = None,
    render: Callable[[str], str] | None = None,
    deadline: float | None = None,
) -> Validity:
    """Greedy-decode every example's prompt on ``backend`` (an HFBackend; with ``adapter``,
    or the base model) and parse it. ``render``: the chat format (default: the tokenizer's
    template, no system turn); ``deadline``: a ``time.monotonic()`` after which no new batch
    starts (``prompts`` then counts the examples checked)."""
    tokenizer = backend.tokenizer
    render = render or (lambda text: render_prompt(tokenizer, text))
    result = Validity(0, 0, 0, 0, 0, 0)
    for start in range(0, len(examples), batch):
        if deadline is not None and time.monotonic() > deadline:
            break
        chunk = examples[start : start + batch]
        result.prompts += len(chunk)
        prompts = [render(e.prompt) for e in chunk]
        completions = backend.generate(prompts, [adapter] * len(chunk), max_new_tokens, 0.0, 0)
        for example, completion in zip(chunk, completions, strict=True):
            parsed = extract_orders(
                completion.text, example.legal, example.phase_type, example.owed
            )
            owed = len(parsed.parsed) + parsed.missing
            result.owed += owed
            result.valid += len(parsed.parsed)
            result.invalid += parsed.invalid
            result.missing += parsed.missing
            result.exact += completion.text.strip() == example.answer.strip()
    return result
