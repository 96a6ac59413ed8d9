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

from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np

from leaguezero.az.checkpoint import CheckpointError, check_schema, load_checkpoint
from leaguezero.az.inference.local import TorchEvaluator
from leaguezero.yatzy.game.features import encode_batch
from leaguezero.yatzy.game.rules import policy_mask_batch
from leaguezero.yatzy.game.tables import NUM_ACTIONS
from leaguezero.yatzy.search.puct import SearchAgent
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearchAgent
from leaguezero.yatzy.train.kinds import checkpoint_schema, kind_of_schema
from leaguezero.yatzy.train.net import MODEL_CONSTRUCTORS

YATZY_SCHEMA = checkpoint_schema("puct")


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


class PolicyAgent:
    """Plays the most probable legal action of the network's policy (no search)."""

    deterministic = True

    def __init__(self, evaluator: TorchEvaluator, name: str) -> None:
        self.evaluator = evaluator
        self.name = name

    def act(self, states: np.ndarray, rows: np.ndarray) -> np.ndarray:
        feats = np.zeros((len(rows), self.evaluator.num_features), np.float32)
        legal = np.zeros((len(rows), NUM_ACTIONS), np.bool_)
        encode_batch(states, rows, feats)
        policy_mask_batch(states, rows, legal)
        priors, _ = self.evaluator.evaluate(feats, legal)
        return np.argmax(np.where(legal, priors, -1.0), axis=1).astype(np.int64)


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
        if kind is not None and kind not in ("turn", "puct"):
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
        kind = kind_of_schema(meta.schema.feature_schema_id)
        fid = meta.schema.feature_schema_id
        evaluator = TorchEvaluator(model, fid, device, margin_weight=settings.margin_utility)
        if kind == "turn":
            return TurnSearchAgent(
                evaluator, name=name, margin_scale=settings.margin_scale, depth=settings.depth
            )
        if settings.depth != 1:
            raise ValueError("depth is an option of the turn search (search=turn)")
        if settings.raw_policy:
            return PolicyAgent(evaluator, name=name)
        mcts = settings.evaluation().mcts()
        return SearchAgent(
            evaluator, mcts, name=name, salt=seed, margin_scale=settings.margin_scale
        )
