"""The phase as a prompt, and a completion parsed back into legal orders.

The prompt lists the board (every power's units and centres), the asking power's own units
and centres, and the legal orders of each orderable location, numbered and compact: the unit
is written once per location and each option without it (``2) A PAR: H | - BUR | S A MAR -
BUR``), which roughly halves the prompt of a movement phase. The model answers one order per
line, numbered as the locations are (``2) A PAR - BUR``), and ``END``: answer line *k* copies
the unit of listing line *k* (``dip_orders_v2``; v1 had no numbers, and small models then
confused units named in the listing's supports with the ones to order).

:func:`extract_orders` is tolerant: bullets, numbering, case, spacing (``A PAR-BUR`` and
``a par  -  bur``), arrows (``->``), ``HOLD``/``HOLDS``, full province names, the listing's
own ``A PAR: - BUR`` form, JSON, and several orders on one line split by ``;`` or ``,`` all
parse. Anything else is counted invalid, a second order for a location is counted invalid, and
an orderable location left without an order is counted missing and filled (a hold in a
movement phase, a disband in a retreat phase; in an adjustment phase the engine waives missing
builds), exactly as the rollout's own validation does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaguezero.diplomacy.game.env import DiplomacyEnv

PROMPT_VERSION = "dip_orders_v2"  # bump when the prompt's layout changes (adapters depend on it)
END_MARK = "END"
PHASE_NAMES = {"M": "movement", "R": "retreats", "A": "adjustments"}
WAIVE = "WAIVE"

# Leading list markers: "-", "*", "•", "1.", "1)", "(1)", "a." ... (greedy spaces after them).
_BULLET = re.compile(r"^\s*(?:[-*•·]+|\(?\d{1,3}[.):]|\(?[a-zA-Z][.)])\s+")
_ARROW = re.compile(r"\s*(?:->|=>|→|–|—|-)\s*")
_SPACES = re.compile(r"\s+")
_WORDS = {"HOLD": "H", "HOLDS": "H", "SUPPORT": "S", "SUPPORTS": "S", "CONVOY": "C",
          "CONVOYS": "C", "RETREAT": "R", "RETREATS": "R", "DISBAND": "D", "DISBANDS": "D",
          "BUILD": "B", "BUILDS": "B", "ARMY": "A", "FLEET": "F"}  # fmt: skip
# "moves to", "move to", "to" between two places are the move dash.
_MOVE_WORDS = re.compile(r"\s+(?:MOVES?\s+TO|MOVES?|TO|INTO)\s+")
_COAST_WORDS = {"NORTH": "NC", "SOUTH": "SC", "EAST": "EC", "WEST": "WC"}
_COAST = re.compile(r"\s*\(\s*(NORTH|SOUTH|EAST|WEST)\s+COAST\s*\)|\s*/\s*(NC|SC|EC|WC)\b")


@functools.cache
def _full_names() -> tuple[re.Pattern[str], dict[str, str]]:
    """Full province names of the standard map (``ST PETERSBURG`` -> ``STP``), longest first."""
    from leaguezero.diplomacy.game.mapinfo import load_map

    names = {}
    for name, abbrev in load_map().loc_name.items():
        base = _COAST.sub("", name).strip()
        if "(" in base or not base or base == abbrev.split("/")[0]:
            continue
        names[base] = abbrev.split("/")[0]
        names.setdefault(base.replace("ST ", "ST. "), abbrev.split("/")[0])
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Z]){'(?:' + alternatives + ')'}(?![A-Z])"), names


def _abbreviate(text: str) -> str:
    """Full province names and coasts as the engine writes them (``Spain (south coast)`` ->
    ``SPA/SC``); text that has none is returned unchanged."""
    if not re.search(r"[A-Z]{4}|\(", text):  # abbreviations only: the common, fast case
        return text
    pattern, names = _full_names()
    text = pattern.sub(lambda m: names[m.group(0)], text)
    return _COAST.sub(lambda m: "/" + (_COAST_WORDS.get(m.group(1) or "", m.group(2) or "")), text)


def canonical_order(text: str) -> str:
    """A spelling-insensitive key of one order: upper case, single spaces, ``X - Y`` dashes,
    long words for the order letters (``HOLDS`` -> ``H``, ``ARMY`` -> ``A``), full province
    names abbreviated (``Army Paris moves to Burgundy`` -> ``A PAR - BUR``) and a trailing full
    stop dropped."""
    text = text.strip().rstrip(".").upper()
    text = _abbreviate(text)
    text = _MOVE_WORDS.sub(" - ", text)
    text = _ARROW.sub(" - ", text)
    words = [_WORDS.get(w, w) for w in _SPACES.split(text.strip()) if w]
    return " ".join(words)


def _compact_options(loc: str, options: Sequence[str]) -> str:
    """``A PAR: H | - BUR | S A MAR - BUR``: the unit once, then each option without it."""
    unit = ""
    parts: list[str] = []
    for option in options:
        tokens = option.split()
        # Unit orders start with the unit ("A PAR ..."); builds ("A PAR B") too; WAIVE does not.
        if len(tokens) >= 3 and tokens[0] in ("A", "F"):
            head = " ".join(tokens[:2])
            if not unit:
                unit = head
            if head == unit:
                parts.append(" ".join(tokens[2:]))
                continue
        parts.append(option)
    label = unit or loc
    return f"{label}: " + " | ".join(parts)


def build_prompt(env: DiplomacyEnv, power: str, legal: Mapping[str, Sequence[str]]) -> str:
    """The prompt for ``power`` in ``env``'s current phase.

    ``legal``: ``{orderable location: legal orders}`` (``env.legal_orders(power)``). The text
    ends with ``ORDERS:`` and a newline, where the completion starts.
    """
    game = env.game
    phase_type = env.phase_type
    lines = [
        f"Diplomacy, no press. Phase {env.phase} ({PHASE_NAMES.get(phase_type, phase_type)}).",
        f"You are {power}.",
        "Board (power: units | centres):",
    ]
    for name, state in sorted(game.powers.items()):
        units = ", ".join(sorted(state.units)) or "-"
        centres = " ".join(sorted(state.centers)) or "-"
        lines.append(f"{name}: {units} | {centres}")
    own = game.powers[power]
    lines.append(f"Your units: {', '.join(sorted(own.units)) or '-'}")
    lines.append(f"Your centres: {' '.join(sorted(own.centers)) or '-'}")
    if phase_type == "A":
        owed = env.adjustment_count(power)
        what = f"build {owed}" if owed > 0 else f"disband {-owed}"
        lines.append(f"Adjustments: {what}.")
    lines.append("Legal orders per location:")
    lines.extend(
        f"{i}) {_compact_options(loc, legal[loc])}" for i, loc in enumerate(sorted(legal), 1)
    )
    lines.append(
        f"Write one full order per line, numbered as above (e.g. 1) A PAR - BUR), then {END_MARK}."
    )
    lines.append("ORDERS:")
    return "\n".join(lines) + "\n"


# A system turn for real instruct models (llm.system_prompt: diplomacy): their template's own
# default ("You are a helpful AI assistant named SmolLM ...") says nothing about the task.
DIPLOMACY_SYSTEM_PROMPT = (
    "You are an expert player of no-press Diplomacy. You are shown the board and every legal "
    "order of your units. Reply with exactly one order per numbered location, copied from its "
    "legal options, one per line, then END. Write nothing else."
)
NAMED_SYSTEM_PROMPTS = {"diplomacy": DIPLOMACY_SYSTEM_PROMPT}


def system_prompt_text(value: str | None) -> str | None:
    """``llm.system_prompt`` / ``--system-prompt`` as sent: a name of
    :data:`NAMED_SYSTEM_PROMPTS` (``diplomacy``) or the text itself (None: no system turn)."""
    if value is None:
        return None
    return NAMED_SYSTEM_PROMPTS.get(value, value)


@dataclass(frozen=True)
class ChatFormat:
    """How a prompt is wrapped for a model with a chat template (``llm.system_prompt``,
    ``llm.chat_template_kwargs``); the default is one user turn and nothing else.

    ``system_prompt``: a system turn before the user turn (None: none, the template's own
    default if it has one, as Qwen2.5's); ``template_kwargs``: extra arguments of
    ``apply_chat_template`` (``{"enable_thinking": False}`` for Qwen3). Both are ignored by a
    tokenizer without a chat template (a base model sees the prompt as written).
    """

    system_prompt: str | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def render(self, tokenizer, prompt: str) -> str:
        """``prompt`` as ``tokenizer``'s model is asked it (see :func:`render_prompt`)."""
        return render_prompt(
            tokenizer,
            prompt,
            system_prompt=system_prompt_text(self.system_prompt),
            **dict(self.template_kwargs),
        )

    def renderer(self, tokenizer) -> Callable[[str], str]:
        """:meth:`render` bound to ``tokenizer`` (what an
        :class:`~leaguezero.diplomacy.llm.tables.LLMTable` takes)."""
        return functools.partial(self.render, tokenizer)


def render_prompt(
    tokenizer, prompt: str, *, system_prompt: str | None = None, **template_kwargs: Any
) -> str:
    """``prompt`` as the model is asked it: wrapped in the tokenizer's chat template (a system
    turn if ``system_prompt`` is given, one user turn, generation prompt added, ``template_kwargs``
    passed on to ``apply_chat_template``) when it has one, else as written (a base model: the
    system prompt and the template arguments are ignored).

    Rendered where the prompt is built (client side): the in-process backend and an
    OpenAI-compatible server (``/v1/completions``) receive the same text, and the trainer
    scores completions on that recorded text.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **template_kwargs
        )
        return _without_template_bos(tokenizer, text)
    return prompt


def _without_template_bos(tokenizer, text: str) -> str:
    """``text`` without the BOS its chat template wrote, when the tokenizer adds one itself.

    Both samplers tokenise a completion prompt with special tokens added (vLLM's
    ``/v1/completions`` ``add_special_tokens`` defaults to true; ``HFBackend.encode``), so a
    template that starts with BOS (Llama 3's ``<|begin_of_text|>``) would give the model two —
    the same two on both sides, but off the format the model was trained on.
    """
    bos = getattr(tokenizer, "bos_token", None)
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if not bos or bos_id is None or not text.startswith(bos):
        return text
    added = tokenizer("", add_special_tokens=True)["input_ids"]
    return text[len(bos) :] if bos_id in added else text


@dataclass
class ExtractedOrders:
    """Orders parsed from a completion.

    ``orders``: legal orders to submit, one per location at most, fills included;
    ``parsed``: the legal orders the completion itself gave; ``invalid``: order-like pieces that
    were not legal or ordered a location twice; ``missing``: orderable locations the completion
    left without an order (filled in ``orders`` where a fill exists).
    """

    orders: list[str]
    parsed: list[str] = field(default_factory=list)
    invalid: int = 0
    missing: int = 0


_UNIT_HEAD = re.compile(r"^\(?([AF])\)?\s+[A-Z]{3}(?:/[A-Z]{2})?$", re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```\s*$")


def _with_unit(unit: str, rest: str) -> list[str]:
    """``A PAR`` + ``- BUR | H`` (the prompt's own listing) -> ``A PAR - BUR``, ``A PAR H``."""
    return [f"{unit} {option.strip()}" for option in rest.split("|") if option.strip()]


def _json_pieces(text: str) -> list[str] | None:
    """Orders of a JSON answer (a list, ``{"orders": [...]}`` or ``{unit: order}``), or None."""
    body = _FENCE.sub("", text.strip())
    starts = [i for i in (body.find("["), body.find("{")) if i >= 0]
    if not starts or body[: min(starts)].strip():
        return None
    start = min(starts)
    end = body.rfind("]" if body[start] == "[" else "}")
    try:
        data = json.loads(body[start : end + 1])
    except ValueError:
        return None

    def walk(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [piece for item in node for piece in walk(item)]
        if isinstance(node, dict):
            if "orders" in node:
                return walk(node["orders"])
            if "order" in node:
                return walk(node["order"])
            out = []
            for key, value in node.items():
                if isinstance(value, str) and _UNIT_HEAD.match(str(key).strip()):
                    out.extend(_with_unit(str(key).strip(), value))
                else:
                    out.extend(walk(value))
            return out
        return []

    return walk(data)


def _pieces(text: str) -> list[str]:
    """Order-like pieces of a completion, stopping at the ``END`` mark (or of a JSON answer)."""
    from_json = _json_pieces(text)
    if from_json is not None:
        return [p.strip() for p in from_json if p.strip() and p.strip().upper() != END_MARK]
    pieces: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.upper().rstrip(".") == END_MARK:
            break
        if not line:
            continue
        line = _BULLET.sub("", line)
        if ":" in line:
            head, rest = line.split(":", 1)
            if _UNIT_HEAD.match(head.strip()) and ":" not in rest:
                # The prompt's listing echoed: "A PAR: - BUR" (one option, or several by "|").
                pieces.extend(_with_unit(head.strip(), rest))
                continue
            # "FRANCE: A PAR - BUR" or "Orders: ..." — orders never contain a colon.
            line = line.rsplit(":", 1)[1]
        pieces.extend(p.strip() for p in re.split(r"[;,|]", line) if p.strip())
    return pieces


def extract_orders(
    text: str,
    legal_orders_by_location: Mapping[str, Sequence[str]],
    phase_type: str = "M",
    max_orders: int | None = None,
) -> ExtractedOrders:
    """Parse ``text`` into legal orders for the locations of ``legal_orders_by_location``.

    ``phase_type``: ``M``, ``R`` or ``A`` (decides the fill of a missing location: hold,
    disband, nothing); ``max_orders``: in an adjustment phase, the builds or disbands owed
    (further ones are invalid). Never raises on model output.
    """
    by_key: dict[str, tuple[str, str]] = {}  # canonical order -> (legal order, location)
    for loc, options in legal_orders_by_location.items():
        for option in options:
            if option != WAIVE:
                by_key.setdefault(canonical_order(option), (option, loc))
    result = ExtractedOrders(orders=[])
    ordered: set[str] = set()
    for piece in _pieces(text):
        key = canonical_order(piece)
        quota_full = max_orders is not None and len(result.parsed) >= max_orders
        if key == WAIVE and phase_type == "A" and not quota_full:
            result.parsed.append(WAIVE)
            continue
        hit = by_key.get(key)
        if hit is None or hit[1] in ordered or quota_full:
            result.invalid += 1
            continue
        ordered.add(hit[1])
        result.parsed.append(hit[0])
    result.orders = list(result.parsed)
    if phase_type == "A":
        owed = max_orders if max_orders is not None else len(legal_orders_by_location)
        result.missing = max(0, min(owed, len(legal_orders_by_location)) - len(result.parsed))
        return result
    suffix = " H" if phase_type == "M" else " D"
    for loc, options in legal_orders_by_location.items():
        if loc in ordered:
            continue
        result.missing += 1
        fill = next((o for o in options if o.endswith(suffix)), None)
        if fill is not None:
            result.orders.append(fill)
    return result
