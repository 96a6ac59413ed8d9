"""The one typed search-settings object: how every Yatzy search is configured.

:class:`SearchSettings` is built once from a config (:meth:`SearchSettings.from_config`) and
handed to whatever searches: self-play, ``yz run``'s gate and oracle evaluation, ``yz gate``,
``yz oracle-eval``, ``yz match``, ``yz play``, ``model:PATH`` agents, the league's opponents and
its evaluator. Commands differ only in the budget they ask for (``gate.sims``,
``oracle_eval.sims``, ``league.eval_sims`` ...), applied by :meth:`SearchSettings.evaluation`;
everything else (``c_puct``, ``normalize_q``, the utility's margin weight and scale, the turn
search's depth: ``search.depth``) comes from the same place, so a network is searched alike
whichever command runs it. The searches take this value itself
(:func:`leaguezero.yatzy.search.puct.make_search`, the agents); no config section is rebuilt
from it.

``margin_utility`` is the weight ``w`` of both searches' utility
``(win + w * tanh(margin / margin_scale)) / (1 + w)``: PUCT's terminal values, the turn search's
last mark, and the evaluator's mix of the value and margin heads. Its config key stays
``mcts.margin_utility`` (the turn search reads it there too); ``margin_scale`` is
``train.margin_scale``, the scale the margin head was trained with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from leaguezero.yatzy.config import MARGIN_SCALE, MctsSection, SearchSection, YatzyConfig

_DEFAULT_MCTS = MctsSection()
_DEFAULT_SEARCH = SearchSection()

# Options a ``model:PATH?key=value`` spec (or a keyword argument) may set.
OPTION_KEYS = (
    "sims", "budget_reroll", "budget_mark", "c_puct", "max_inflight_per_game", "virtual_loss",
    "margin_utility", "margin_scale", "normalize_q", "depth",
)  # fmt: skip


@dataclass(frozen=True)
class SearchSettings:
    """Every knob of the PUCT and turn searches (defaults: the config's defaults).

    ``kind`` is the search self-play trains (``search.kind``); a checkpoint agent plays the
    search its network is for (its feature schema) with these parameters.
    """

    kind: Literal["turn", "puct"] = "turn"
    # PUCT budgets; raw_policy (sims=0) plays the network's most probable legal move instead.
    budget_reroll: int = _DEFAULT_MCTS.budget_reroll
    budget_mark: int = _DEFAULT_MCTS.budget_mark
    raw_policy: bool = False
    c_puct: float = _DEFAULT_MCTS.c_puct
    max_inflight_per_game: int = _DEFAULT_MCTS.max_inflight_per_game
    virtual_loss: float = _DEFAULT_MCTS.virtual_loss
    normalize_q: bool = _DEFAULT_MCTS.normalize_q
    # The utility (both searches and the evaluator's head mix).
    margin_utility: float = _DEFAULT_MCTS.margin_utility
    margin_scale: float = MARGIN_SCALE
    # Turn search: 1 = the network values the next turn starts; 2 = one more turn, exactly.
    depth: int = _DEFAULT_SEARCH.depth
    # Self-play exploration (evaluation() turns it off).
    dirichlet_alpha: float = _DEFAULT_MCTS.dirichlet_alpha
    dirichlet_epsilon: float = _DEFAULT_MCTS.dirichlet_epsilon
    temperature: float = _DEFAULT_MCTS.temperature
    temperature_decisions: int = _DEFAULT_MCTS.temperature_decisions
    turn_temperature: float = _DEFAULT_SEARCH.temperature
    temperature_turns: int = _DEFAULT_SEARCH.temperature_turns

    def __post_init__(self) -> None:
        # The config's bounds (a model spec's options bypass its validation).
        if self.depth not in (1, 2):
            raise ValueError(f"depth must be 1 or 2 (turn search), got {self.depth!r}")
        if min(self.budget_reroll, self.budget_mark, self.max_inflight_per_game) < 1:
            raise ValueError(
                "budget_reroll, budget_mark and max_inflight_per_game must be >= 1 "
                f"(got {self.budget_reroll}, {self.budget_mark}, {self.max_inflight_per_game})"
            )
        if self.c_puct <= 0 or self.margin_scale <= 0:
            raise ValueError(
                f"c_puct and margin_scale must be > 0 (got {self.c_puct}, {self.margin_scale})"
            )
        if self.virtual_loss < 0 or self.margin_utility < 0:
            raise ValueError(
                "virtual_loss and margin_utility must be >= 0 "
                f"(got {self.virtual_loss}, {self.margin_utility})"
            )

    @classmethod
    def from_config(cls, cfg: YatzyConfig) -> SearchSettings:
        """The settings of a whole config: ``search``, ``mcts`` and ``train.margin_scale``.
        Built once where a command starts and handed down (never rebuilt from the config)."""
        m = cfg.mcts
        return cls(
            kind=cfg.search.kind, depth=cfg.search.depth,
            budget_reroll=m.budget_reroll, budget_mark=m.budget_mark,
            c_puct=m.c_puct, max_inflight_per_game=m.max_inflight_per_game,
            virtual_loss=m.virtual_loss, normalize_q=m.normalize_q,
            margin_utility=m.margin_utility, margin_scale=cfg.train.margin_scale,
            dirichlet_alpha=m.dirichlet_alpha, dirichlet_epsilon=m.dirichlet_epsilon,
            temperature=m.temperature, temperature_decisions=m.temperature_decisions,
            turn_temperature=cfg.search.temperature,
            temperature_turns=cfg.search.temperature_turns,
        )  # fmt: skip

    def evaluation(self, sims: int | None = None) -> SearchSettings:
        """Evaluation mode (no root noise, temperature 0) with ``sims`` simulations per decision
        for both PUCT budgets (0: the raw policy; None: keep the budgets)."""
        out = replace(self, dirichlet_epsilon=0.0, temperature=0.0, turn_temperature=0.0)
        return out if sims is None else out.with_sims(int(sims))

    def with_sims(self, sims: int) -> SearchSettings:
        """Both PUCT budgets set to ``sims`` (0: the raw policy)."""
        if sims < 0:
            raise ValueError(f"sims must be >= 0, got {sims}")
        if sims == 0:
            return replace(self, raw_policy=True)
        return replace(self, budget_reroll=sims, budget_mark=sims, raw_policy=False)

    def with_options(self, options: dict[str, Any]) -> SearchSettings:
        """These settings with a model spec's options (strings from a query string, or typed
        values): ``sims`` first, then the named fields. Raises ValueError for an unknown key or
        a bad value."""
        unknown = set(options) - set(OPTION_KEYS)
        if unknown:
            raise ValueError(
                f"unknown model option(s) {', '.join(sorted(unknown))}: use search, depth, sims, "
                "budget_reroll, budget_mark, c_puct, max_inflight_per_game, margin_utility, "
                "margin_scale, normalize_q, virtual_loss, device"
            )
        out = self
        if "sims" in options:
            out = out.with_sims(_parse(int, options["sims"], "sims"))
        types = {f.name: f.type for f in fields(self)}
        changes = {}
        for key, value in options.items():
            if key == "sims":
                continue
            if key == "depth" and str(value) not in ("1", "2"):
                raise ValueError(f"depth must be 1 or 2 (turn search), got {value!r}")
            kind = {"int": int, "float": float, "bool": bool}[types[key]]
            changes[key] = _parse(kind, value, key)
            if key in ("budget_reroll", "budget_mark"):
                changes["raw_policy"] = False
        return replace(out, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields (for a job that runs in another process)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchSettings:
        return cls(**data)


def evaluation_settings(cfg: YatzyConfig, sims: int | None = None) -> SearchSettings:
    """The search of a command or a page that plays (not one that trains): the config's
    settings in evaluation mode with ``sims`` simulations (None: the ``mcts`` budgets).
    Every ``yz`` command and the web app build theirs here."""
    return SearchSettings.from_config(cfg).evaluation(sims)


def _parse(kind: type, value: Any, key: str) -> Any:
    if isinstance(value, str):
        text = value.strip().lower()
        if kind is bool:
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"model option {key}={value!r} is not a boolean (true/false)")
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"model option {key}={value!r} is not a number") from None
    if kind is bool:
        return bool(value)
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"model option {key}={value!r} is not a whole number")
    return kind(value)
