"""Adapter names, serving slots and the cluster-seating fallback
(docs/reference/design.md#several-adapters-in-one-game).

- Adapter names are immutable and versioned: ``hero-v0003`` is one set of weights forever. A
  trained hero gets a new name per published version; a name is never reloaded with other
  weights (vLLM caches adapters by name, so reusing a name would serve stale weights).
- :class:`AdapterSlots` keeps at most ``max_loras`` adapters loaded on a client (vLLM's
  ``--max-loras``): it loads what a game needs and unloads retired ones, least recently used
  first, never a pinned one (the hero's current version). A name the server lists is checked
  against the folder it should serve (the ``root`` of its model card, where the server gives
  one) and loaded again when it serves another; a name the server has forgotten (a restart)
  is loaded again from the folder it was ensured with (:meth:`AdapterSlots.reload`).
- :func:`fit_seating` seats a game so that its distinct adapters fit the slots: every
  opponent in its own seat when they fit, else the league's ``cluster_seating``
  (``[Hero, A, A, A, B, B, B]``) with as many distinct opponents as slots allow.
- :func:`check_adapter_fits`: an adapter folder a run starts from (``--init-from``) has the
  run's LoRA shape.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from leaguezero.diplomacy.llm.client import AdapterCapacityError, GenerationClient, LLMError
from leaguezero.league.matchmaker import Rng, cluster_seating

if TYPE_CHECKING:
    from leaguezero.diplomacy.llm.model.hf_backend import LoraSettings

_VERSIONED = re.compile(r"^(?P<prefix>[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)-v(?P<version>\d{4,})$")


def versioned_name(prefix: str, version: int) -> str:
    """``hero`` and 3 -> ``hero-v0003``."""
    if version < 0:
        raise ValueError(f"adapter version must be >= 0, got {version}")
    if not re.fullmatch(r"[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*", prefix):
        raise ValueError(f"adapter prefix {prefix!r} must be letters, digits, '_' and '-'")
    return f"{prefix}-v{version:04d}"


def parse_versioned_name(name: str) -> tuple[str, int] | None:
    """``hero-v0003`` -> ``("hero", 3)``; None for a name that is not versioned."""
    match = _VERSIONED.match(name)
    return (match["prefix"], int(match["version"])) if match else None


RUN_ID_FILE = "adapter_run_id"  # in the run folder: the run's part of its served names


def run_prefix(run_dir: str | os.PathLike, role: str = "hero") -> str:
    """The served-name prefix of a run's adapters: ``{folder}-{id}-{role}``, where ``id`` is
    drawn once, at random, and kept in ``RUN/adapter_run_id`` (a resumed run goes on with
    its names). The folder's name alone is not unique: two runs under ``…/a/llm`` and
    ``…/b/llm`` (compose's default ``--out``) sharing one server would load, unload and
    sample each other's ``llm-hero-v0003``."""
    folder = Path(run_dir)
    path = folder / RUN_ID_FILE
    try:
        run_id = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        run_id = ""
    except (OSError, UnicodeDecodeError) as err:
        raise LLMError(f"cannot read {path}: {err}") from None
    if not re.fullmatch(r"[0-9a-f]{8,32}", run_id):
        from leaguezero.common.atomic import atomic_write_text

        run_id = uuid.uuid4().hex[:10]
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, run_id + "\n")
    base = re.sub(r"[^A-Za-z0-9_]+", "_", folder.resolve().name).strip("_")[:40] or "run"
    return f"{base}-{run_id}-{role}"


class SlotsExceededError(LLMError):
    """A game needs more distinct adapters than the server has slots."""


class AdapterSlots:
    """Load and unload adapters on ``client`` so that at most ``max_loras`` are resident.

    ``pinned``: names never evicted (the hero's live version). Eviction is least recently
    used among loaded adapters the current request does not need; with ``owned_only`` only
    adapters this object loaded count and may be evicted (a server shared by processes).
    """

    def __init__(
        self,
        client: GenerationClient,
        max_loras: int,
        pinned: Iterable[str] = (),
        *,
        owned_only: bool = False,
    ):
        if max_loras < 1:
            raise ValueError(f"max_loras must be at least 1, got {max_loras}")
        self.client = client
        self.max_loras = max_loras
        self.pinned = set(pinned)
        # owned_only: count and evict only adapters loaded through this object (a server
        # shared by the trainer and the evaluator: neither unloads what the other uses).
        self.owned_only = owned_only
        self.owned: set[str] = set()
        self._clock = 0
        self._last_used: dict[str, int] = {}
        # Every name ensured and the folder it serves: what reload() loads again after the
        # server forgot it (names are immutable: a name is one folder for good).
        self.folders: dict[str, str] = {}
        self._lock = threading.Lock()  # ensure/reload from the games' threads

    def _wrong_folder(self, needed: Mapping[str, str]) -> list[str]:
        """Names in ``needed`` the server lists as loaded from another folder (a run that
        shares the server used the name, or an earlier process loaded other weights)."""
        roots = getattr(self.client, "adapter_roots", None)
        if roots is None:
            return []
        wrong = []
        for name, root in roots().items():
            if name not in needed or not root or not os.path.isabs(root):
                continue  # not asked for, or the server does not say where it came from
            if os.path.abspath(root) != os.path.abspath(os.fspath(needed[name])):
                wrong.append(name)
        return wrong

    def ensure(self, needed: Mapping[str, str]) -> list[str]:
        """Make every ``{name: folder}`` of ``needed`` loaded; returns the names unloaded.

        Raises :class:`SlotsExceededError` when ``needed`` alone is more than the slots, or the
        pinned adapters leave too few.
        """
        if len(needed) > self.max_loras:
            raise SlotsExceededError(
                f"{len(needed)} distinct adapters needed but max_loras is {self.max_loras}; "
                "seat the game with fit_seating (cluster sampling)"
            )
        with self._lock:
            return self._ensure(needed)

    def _ensure(self, needed: Mapping[str, str]) -> list[str]:
        self.folders.update({name: os.fspath(folder) for name, folder in needed.items()})
        for name in self._wrong_folder(needed):
            self.client.unload_adapter(name)  # loaded again below, from the expected folder
        loaded = set(self.client.list_adapters())
        if self.owned_only:
            self.owned &= loaded  # unloaded elsewhere meanwhile
            missing = [name for name in needed if name not in loaded]
            loaded = self.owned | (self.pinned & loaded)
        else:
            missing = [name for name in needed if name not in loaded]
        excess = len(loaded) + len(missing) - self.max_loras
        evicted: list[str] = []
        if excess > 0:
            candidates = sorted(
                (n for n in loaded if n not in needed and n not in self.pinned),
                key=lambda n: self._last_used.get(n, -1),
            )
            if len(candidates) < excess:
                raise SlotsExceededError(
                    f"cannot free {excess} adapter slot(s): pinned or needed adapters fill "
                    f"max_loras = {self.max_loras}"
                )
            for name in candidates[:excess]:
                self.client.unload_adapter(name)
                self._last_used.pop(name, None)
                self.owned.discard(name)
                evicted.append(name)
        for name in missing:
            while True:
                try:
                    self.client.load_adapter(name, needed[name])
                    break
                except AdapterCapacityError as err:
                    # The server is fuller than our count says (memory, other clients): free
                    # one of ours that this request does not need, else give up.
                    spare = sorted(
                        (n for n in self.owned if n not in needed and n not in self.pinned),
                        key=lambda n: self._last_used.get(n, -1),
                    )
                    if not spare:
                        raise SlotsExceededError(
                            f"the server refused adapter {name!r}: {err}"
                        ) from None
                    self.client.unload_adapter(spare[0])
                    self._last_used.pop(spare[0], None)
                    self.owned.discard(spare[0])
                    evicted.append(spare[0])
            self.owned.add(name)
        for name in needed:
            self._clock += 1
            self._last_used[name] = self._clock
        return evicted

    def reload(self, name: str) -> bool:
        """Load ``name`` again from the folder it was last ensured with, if the server has
        forgotten it (a restart); True when it is loaded now. A name never ensured here, or
        retired, is not this object's to load (False). The hook of
        :attr:`~.openai_client.OpenAIClient.reloader`."""
        folder = self.folders.get(name)
        if folder is None:
            return False
        try:
            with self._lock:
                self._ensure({name: folder})
        except LLMError:
            return False
        return True

    def retire(self, name: str) -> bool:
        """Unload ``name`` if it is loaded (a superseded hero version); True if it was."""
        self.pinned.discard(name)
        self._last_used.pop(name, None)
        self.owned.discard(name)
        self.folders.pop(name, None)
        if name in self.client.list_adapters():
            self.client.unload_adapter(name)
            return True
        return False


def fit_seating(
    hero: str,
    opponents: Sequence[str],
    *,
    max_loras: int,
    uses_slot: Callable[[str], bool],
    rng: Rng,
    hero_seat: int,
    num_seats: int = 7,
) -> list[str]:
    """One agent name per seat, with at most ``max_loras`` distinct adapters at the table.

    ``opponents``: the matchmaker's draw for the ``num_seats - 1`` other seats;
    ``uses_slot(name)``: whether an agent is an adapter (bots and the base model are not).
    When all distinct adapters (hero included) fit, the opponents keep their own seats in order;
    otherwise the table falls back to :func:`leaguezero.league.matchmaker.cluster_seating`
    with the largest number of distinct opponents that fits.
    """
    names = [hero, *opponents]
    adapters = {n for n in names if uses_slot(n)}
    if len(adapters) <= max_loras:
        seats = list(opponents[: num_seats - 1])
        if len(seats) < num_seats - 1:
            return cluster_seating(hero, opponents, num_seats, num_seats - 1, rng, hero_seat)
        return [*seats[:hero_seat], hero, *seats[hero_seat:]]
    hero_slots = 1 if uses_slot(hero) else 0
    unique = list(dict.fromkeys(opponents))
    for max_unique in range(min(len(unique), num_seats - 1), 0, -1):
        chosen = unique[:max_unique]
        if hero_slots + len({n for n in chosen if uses_slot(n) and n != hero}) <= max_loras:
            return cluster_seating(hero, chosen, num_seats, max_unique, rng, hero_seat)
    raise SlotsExceededError(f"max_loras = {max_loras} leaves no slot for any adapter opponent")


def check_adapter_fits(folder: Path, lora: LoraSettings) -> None:
    """Raise ``ValueError`` (one line) unless the adapter folder's rank, alpha and
    target modules are the hero's (``llm.lora_rank``, ``llm.lora_alpha``, resolved
    ``llm.target_modules``): ``--init-from`` continues an adapter, it does not reshape it."""
    try:
        raw = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(
            f"--init-from {folder}: unreadable adapter_config.json ({reason})"
        ) from None
    targets = raw.get("target_modules")
    found = set(targets) if isinstance(targets, list) else {targets}
    problems = []
    if raw.get("r") != lora.rank:
        problems.append(f"rank {raw.get('r')} (llm.lora_rank is {lora.rank})")
    alpha = raw.get("lora_alpha")
    if not isinstance(alpha, int | float) or float(alpha) != float(lora.alpha):
        problems.append(f"alpha {alpha} (llm.lora_alpha is {lora.alpha})")
    if found != set(lora.target_modules):
        problems.append(
            f"targets {sorted(map(str, found))} (llm.target_modules gives "
            f"{sorted(lora.target_modules)})"
        )
    if raw.get("rank_pattern") or raw.get("alpha_pattern"):
        problems.append("per-module ranks or alphas")
    if problems:
        raise ValueError(
            f"--init-from {folder} does not fit this run's LoRA: {'; '.join(problems)}; "
            "set the llm section to match"
        )
