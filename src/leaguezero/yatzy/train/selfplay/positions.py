"""What self-play evaluates positions with: the best network in process, or the client of an
inference server (``selfplay.infer``), both mixing the value and margin heads with the search
settings' ``margin_utility``; and the oracle's action values for the sampled search-root logs.
Used by in-process self-play, the worker processes and the Ray actors alike.
"""

from __future__ import annotations

from pathlib import Path

from leaguezero.yatzy.agents.model import load_yatzy_model
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.schema import feature_schema_id
from leaguezero.yatzy.search.settings import SearchSettings


def oracle_values(oracle):
    """Every action's oracle value for a batch of states (for root logs), or None without one."""
    if oracle is None:
        return None
    from leaguezero.yatzy.agents.oracle import OracleAgent

    return OracleAgent(oracle=oracle).action_values


def make_selfplay_evaluator(cfg: YatzyConfig, settings: SearchSettings, best_path: Path | None):
    """The self-play evaluator: the best net in process, or the inference server's client;
    it mixes the value and margin heads with ``settings.margin_utility``."""
    from leaguezero.yatzy.game.tables import NUM_ACTIONS

    fid = feature_schema_id(cfg.search.kind)
    margin_weight = settings.margin_utility
    if cfg.selfplay.infer == "local":
        from leaguezero.az.inference.local import TorchEvaluator, resolve_dtype

        model, _ = load_yatzy_model(best_path, cfg.run.device, kind=cfg.search.kind)
        return TorchEvaluator(
            model, fid, cfg.run.device, margin_weight=margin_weight,
            dtype=resolve_dtype(cfg.selfplay.inference_dtype, cfg.run.device),
        )  # fmt: skip
    from leaguezero.az.inference.client import InferenceClient

    client = InferenceClient(
        cfg.selfplay.infer,
        feature_schema_id=fid,
        num_actions=NUM_ACTIONS,
        max_pending_total=cfg.infer.max_pending_total,
    )
    client.margin_weight = margin_weight
    if best_path is not None and best_path.is_file():
        # The server may have started with another model: make it serve this run's best (an
        # admin op: the client sends this user's admin token where the server needs it).
        from leaguezero.az.inference.admin import read_token

        client.load_model(0, str(best_path.resolve()), admin_token=read_token())
    return client
