"""Match agents backed by a network checkpoint: ``model:PATH[?key=value&...]``.

Options (query string or keyword arguments):

* ``search=turn|puct``: which search plays; by default the one the checkpoint's feature
  schema is for (schema 2 networks play the turn search, schema 1 networks PUCT). The PUCT
  options below are ignored by the turn search;
* ``depth=1|2`` (turn search): 2 values each successor by an exact expectimax of the
  opponent's next turn over the network's values (two turns deep; ~100x the evaluations);
* ``sims=N`` sets both search budgets; ``budget_reroll`` / ``budget_mark`` set them separately;
  ``sims=0`` plays the raw policy (most probable legal action, no search);
* ``c_puct``, ``max_inflight_per_game``, ``virtual_loss``, ``margin_utility``, ``normalize_q``
  as in the ``mcts`` config section, ``margin_scale`` as ``train.margin_scale``;
* ``device`` (``cpu`` | ``cuda``).

The options override a :class:`~leaguezero.yatzy.search.settings.SearchSettings` (the
defaults, or the one a command built from its config); :meth:`ModelAgent.from_settings` is the
one place a checkpoint agent is built from settings.

Evaluation mode always: no root noise, temperature 0, deterministic ties and chance streams
seeded from the position, so the same states give the same moves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl

from leaguezero.az.checkpoint import CheckpointError, check_schema, load_checkpoint
from leaguezero.az.evaluator import Evaluator
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.net.networks import MODEL_CONSTRUCTORS
from leaguezero.yatzy.net.schema import SEARCH_KINDS, checkpoint_schema, kind_of_schema
from leaguezero.yatzy.search.policy import PolicyAgent as PolicyAgent  # sims=0 (re-exported)
from leaguezero.yatzy.search.puct import SearchAgent
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearchAgent

YATZY_SCHEMA = checkpoint_schema("puct")


def _turn_agent(evaluator: Evaluator, settings: SearchSettings, name: str, seed: int) -> Agent:
    return TurnSearchAgent(
        evaluator, name=name, margin_scale=settings.margin_scale, depth=settings.depth
    )


def _puct_agent(evaluator: Evaluator, settings: SearchSettings, name: str, seed: int) -> Agent:
    if settings.depth != 1:
        raise ValueError("depth is an option of the turn search (search=turn)")
    if settings.raw_policy:
        return PolicyAgent(evaluator, name=name)
    return SearchAgent(evaluator, settings.evaluation(), name=name, salt=seed)


# The evaluation-mode agent of a network of each search kind (``agent(evaluator, settings,
# name, seed)``), keyed as :data:`leaguezero.yatzy.net.schema.SEARCH_KINDS`.
AGENT_OF_KIND: dict[str, Callable[[Evaluator, SearchSettings, str, int], Agent]] = {
    "turn": _turn_agent,
    "puct": _puct_agent,
}


def load_yatzy_model(path: str | Path, device: str = "cpu", kind: str | None = None):
    """(model in eval mode, checkpoint meta) for a Yatzy checkpoint; schema ids are checked.

    ``kind`` (``puct`` | ``turn``) is the search the caller will run; None accepts either
    (``kind_of_schema(meta.schema.feature_schema_id)`` tells which).
    """
    model, meta = load_checkpoint(path, MODEL_CONSTRUCTORS, device=device)
    try:
        found = kind_of_schema(meta.schema.feature_schema_id)
    except ValueError as err:
        raise CheckpointError(f"checkpoint {path}: {err}") from None
    if kind is not None and kind != found:
        raise CheckpointError(
            f"checkpoint {path} is a {found}-search network (feature schema "
            f"{meta.schema.feature_schema_id}); search={kind} needs a {kind} network"
        )
    check_schema(meta, checkpoint_schema(found), where=f"checkpoint {path}")
    return model, meta


class ModelAgent:
    """Factory for checkpoint-backed agents (see the module docstring)."""

    @staticmethod
    def from_spec(
        spec: str,
        seed: int = 0,
        settings: SearchSettings | None = None,
        name: str | None = None,
        **options: object,
    ):
        """The agent of ``PATH[?key=value&...]``: ``settings`` (default: the config defaults)
        with the spec's options and ``options`` applied; ``name`` as in :meth:`from_settings`."""
        path_text, _, query = spec.partition("?")
        opts: dict[str, object] = dict(parse_qsl(query))
        opts.update(options)
        path = Path(path_text)
        device = str(opts.pop("device", "cpu"))
        kind = opts.pop("search", None)
        if kind is not None and kind not in SEARCH_KINDS:
            raise ValueError(f"unknown search {kind!r}: use search=turn or search=puct")
        opts.pop("table_path", None)  # make_agent passes it to every agent; only the oracle's
        settings = (settings or SearchSettings()).with_options(opts)
        return ModelAgent.from_settings(
            path, settings, seed=seed, device=device, kind=kind, name=name
        )

    @staticmethod
    def from_settings(
        path: str | Path,
        settings: SearchSettings,
        *,
        seed: int = 0,
        device: str = "cpu",
        kind: str | None = None,
        name: str | None = None,
    ):
        """A checkpoint agent in evaluation mode with ``settings``: the turn search for a
        schema-2 network, PUCT (or the raw policy when ``settings.raw_policy``) for a schema-1
        one; ``kind`` (``turn`` | ``puct``) insists on one."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"model checkpoint {path} does not exist")
        name = name or f"model:{path}"
        try:
            model, meta = load_yatzy_model(path, device, kind=kind)
        except CheckpointError as err:
            raise ValueError(str(err)) from None
        fid = meta.schema.feature_schema_id
        evaluator = TorchEvaluator(model, fid, device, margin_weight=settings.margin_utility)
        agent = AGENT_OF_KIND[kind_of_schema(fid)]  # the turn search, PUCT or the raw policy
        return agent(evaluator, settings, name, seed)
