"""The AlphaZero loop (``yz run``): self-play -> train -> gate -> (oracle eval) -> promote.

Everything lives in the run directory, and every phase leaves a file behind that marks it done,
so a run killed at any point resumes with ``--resume`` where it stopped (KataGo's habit: the
pieces talk through files)::

    RUN/config.yaml                      resolved config (the one --resume uses)
    RUN/run_state.json                   last finished iteration and phases (atomic)
    RUN/models/best.pt                   current best; best_0000.pt is the initial net
    RUN/lineage.json                     where best_0000.pt came from (``--init-from`` only)
    RUN/models/candidate_0003.pt         candidate trained in iteration 3
    RUN/models/anchor.pt                 gate.mode continuous: the best of the last check
    RUN/replay/iter_0003/shard_*.safetensors (+ .meta.json)
    RUN/gate/iter_0003.json              gating result; RUN/gate/seedsets/<name>.json
    RUN/eval/iter_0003.json              oracle evaluation
    RUN/logs/iteration_stats.ndjson      one event per iteration (always)
    RUN/logs/mcts_roots.ndjson           sampled search roots
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from leaguezero.az.checkpoint import CheckpointMeta, save_checkpoint
from leaguezero.az.replay import ReplayError, load_window, window_iterations
from leaguezero.az.train import TrainReport, TrainSettings, train_candidate
from leaguezero.common.atomic import atomic_write_bytes, atomic_write_json
from leaguezero.common.config import write_resolved_config
from leaguezero.common.events import EventWriter
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.agents.model import ModelAgent, load_yatzy_model
from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.net.schema import build_network, checkpoint_schema
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.train.kinds import selfplay_function, shard_schema
from leaguezero.yatzy.train.lineage import checkpoint_lineage, start_from, write_lineage
from leaguezero.yatzy.train.selfplay.positions import make_selfplay_evaluator, oracle_values
from leaguezero.yatzy.train.selfplay.slots import SelfPlayStats
from leaguezero.yatzy.train.selfplay.workers import run_selfplay_workers

if TYPE_CHECKING:
    from leaguezero.yatzy.train.evaluation.gate import GateResult

RUN_STATE_VERSION = 1
PHASES = ("selfplay", "train", "gate", "eval", "promote")

Reporter = Callable[[str, int, int], None]  # (phase, advance, total)


@dataclass(frozen=True)
class Backend:
    """Where the loop's heavy phases run. The command line picks it (``run.backend``:
    :func:`local_backend` here, the Ray one in :mod:`leaguezero.yatzy.cli.ray_backend`) and
    passes it to :func:`run_iteration`; the loop itself never asks which backend it has.

    ``selfplay_workers`` has the signature of
    :func:`~leaguezero.yatzy.train.selfplay.workers.run_selfplay_workers` and ``train`` that of
    :func:`train_phase`. With ``always_workers`` even one self-play worker runs through
    ``selfplay_workers`` (Ray actors); otherwise one worker plays in process.
    """

    name: str
    selfplay_workers: Callable[..., SelfPlayStats]
    train: Callable[[YatzyConfig, RunDir, int, Reporter], dict]
    always_workers: bool = False


class RunDir:
    """Paths and small state files of a run directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.models = self.root / "models"
        self.replay = self.root / "replay"
        self.gate = self.root / "gate"
        self.eval = self.root / "eval"
        self.logs = self.root / "logs"
        self.best = self.models / "best.pt"
        self.anchor = self.models / "anchor.pt"  # gate.mode continuous: the last checked best
        self.state_path = self.root / "run_state.json"

    def candidate(self, it: int) -> Path:
        return self.models / f"candidate_{it:04d}.pt"

    def read_state(self) -> dict:
        if not self.state_path.exists():
            return {"schema_version": RUN_STATE_VERSION, "iteration": 0, "phases": []}
        state = json.loads(self.state_path.read_text())
        if state.get("schema_version") != RUN_STATE_VERSION:
            raise ValueError(f"{self.state_path} has an unknown schema_version")
        return state

    def write_state(self, iteration: int, phases: list[str], **extra: object) -> None:
        atomic_write_json(
            self.state_path,
            {"schema_version": RUN_STATE_VERSION, "iteration": iteration, "phases": phases,
             **extra},
        )  # fmt: skip


def init_run(cfg: YatzyConfig, run: RunDir, init_from: Path | None = None) -> YatzyConfig:
    """Create a run directory with its resolved config and the initial best network.

    ``init_from`` (a new run only): start from that checkpoint instead of a random network;
    the returned config has the network's ``model`` section and ``RUN/lineage.json`` says
    where it came from (:mod:`leaguezero.yatzy.train.lineage`; raises ``LineageError``
    before writing anything when the checkpoint does not fit). Returns the config the run uses.
    """
    if init_from is not None and not run.best.exists():
        cfg, record = start_from(cfg, run.models, init_from)
        write_lineage(run.root, record)
    for folder in (run.models, run.replay, run.gate, run.eval, run.logs):
        folder.mkdir(parents=True, exist_ok=True)
    write_resolved_config(cfg, run.root)
    if not run.best.exists():
        net = build_network(cfg, cfg.run.seed)
        schema = checkpoint_schema(cfg.search.kind)
        save_checkpoint(run.models / "best_0000.pt", net, kind=net.kind, kwargs=net.kwargs(),
                        schema=schema, extra={"iteration": 0})  # fmt: skip
        shutil.copyfile(run.models / "best_0000.pt", run.best)
    if not run.state_path.exists():
        run.write_state(0, [])
    return cfg


def _copy_atomic(src: Path, dst: Path) -> None:
    atomic_write_bytes(dst, src.read_bytes())
    meta = Path(str(src) + ".meta.json")
    if meta.exists():
        atomic_write_bytes(Path(str(dst) + ".meta.json"), meta.read_bytes())


def run_iteration(
    cfg: YatzyConfig, run: RunDir, it: int, report: Reporter, oracle,
    oracle_table: Path | None = None, league=None, backend: Backend | None = None, *,
    settings: SearchSettings,
) -> dict:  # fmt: skip
    """Run (or finish) iteration ``it``; returns its summary record. ``settings``: the run's
    search, built where ``yz run`` starts (self-play's; the gate's and the oracle evaluation's
    at ``gate.sims`` / ``oracle_eval.sims``).

    ``backend`` runs the self-play workers and the train phase (default: :func:`local_backend`).

    ``league`` (a :class:`leaguezero.yatzy.train.league.run.LeagueRun`, league mode only) plays
    self-play against league opponents, adds the candidate to the league by the schedule and
    starts its background rating after training (phase ``league``).
    """
    backend = backend or local_backend()
    state = run.read_state()
    phases: list[str] = list(state["phases"]) if state["iteration"] == it - 1 else []
    record: dict = dict(state.get("partial", {})) if phases else {}
    record["iteration"] = it

    def done(phase: str) -> None:
        phases.append(phase)
        run.write_state(it - 1, phases, partial=record)

    if "selfplay" not in phases:
        stats = _selfplay_phase(cfg, settings, run, it, report, oracle, oracle_table, league,
                                backend)  # fmt: skip
        record["selfplay"] = stats.to_dict()
        done("selfplay")

    if "train" not in phases:
        record["train"] = backend.train(cfg, run, it, report)
        done("train")

    if league is not None and "league" not in phases:
        league.after_train(it, run.candidate(it))
        done("league")

    if "gate" not in phases and cfg.gate.continuous:
        record["gate"] = _continuous_gate(cfg, settings, run, it, report)
        atomic_write_json(run.gate / f"iter_{it:04d}.json", record["gate"])
        done("gate")

    if "gate" not in phases:
        result = gate_phase(cfg, settings, run.candidate(it), run.best, run.gate / "seedsets",
                            report)  # fmt: skip
        atomic_write_json(run.gate / f"iter_{it:04d}.json", result.to_dict())
        record["gate"] = result.to_dict()
        done("gate")

    if "eval" not in phases:
        record["eval"] = _evaluate(cfg, settings, run, it, oracle, report)
        atomic_write_json(run.eval / f"iter_{it:04d}.json", record["eval"])
        done("eval")

    if "promote" not in phases:
        record["promoted"], record["promotion_reason"] = _promote(cfg, run, it, record)
        done("promote")

    EventWriter(run.logs / "iteration_stats.ndjson").emit("iteration", **_flat(record))
    run.write_state(it, [])
    if league is not None:
        league.end_iteration(it)
    return record


def _selfplay_phase(
    cfg: YatzyConfig,
    settings: SearchSettings,
    run: RunDir,
    it: int,
    report: Reporter,
    oracle,
    oracle_table: Path | None,
    league,
    backend: Backend,
) -> SelfPlayStats:
    """The iteration's self-play into ``replay/iter_NNNN``: league games in process (league
    mode), the backend's worker processes, or the search kind's self-play in this process."""
    games = cfg.selfplay.games_per_iteration
    seed = cfg.run.seed * 100_003 + it
    out = run.replay / f"iter_{it:04d}"
    roots = EventWriter(run.logs / "mcts_roots.ndjson", iteration=it)
    report("selfplay", 0, games)
    if league is not None:  # league mode: the hero against sampled opponents, in process
        return league.selfplay(
            it, make_selfplay_evaluator(cfg, settings, run.best), out, games=games, seed=seed,
            roots_log=roots, oracle_values=oracle_values(oracle),
            progress=lambda n: report("selfplay", n, games),
        )  # fmt: skip
    if cfg.selfplay.workers > 1 or backend.always_workers:
        return backend.selfplay_workers(
            cfg, run.best, out, settings=settings, games=games, seed=seed,
            roots_log=run.logs / "mcts_roots.ndjson", oracle_table=oracle_table,
            progress=lambda n: report("selfplay", n, games),
        )  # fmt: skip
    return selfplay_function(cfg.search.kind)(
        cfg, make_selfplay_evaluator(cfg, settings, run.best), out, settings=settings,
        games=games, seed=seed, roots_log=roots, oracle_values=oracle_values(oracle),
        progress=lambda n: report("selfplay", n, games),
    )  # fmt: skip


def _promote(cfg: YatzyConfig, run: RunDir, it: int, record: dict) -> tuple[bool, str]:
    """Promote the candidate when the gate said so and the guardrail allows (atomic copies to
    ``models/best.pt`` and ``best_NNNN.pt``), roll back or move the anchor as the continuous
    check decided; returns (promoted, reason)."""
    promote = bool(record["gate"]["promote"])
    reason = record["gate"]["reason"]
    if promote and guardrail_ok(cfg, record.get("eval", {})) is False:
        promote, reason = False, "guardrail"
    if promote:
        _copy_atomic(run.candidate(it), run.models / f"best_{it:04d}.pt")
        _copy_atomic(run.candidate(it), run.best)
    if reason == "rollback":
        _copy_atomic(run.anchor, run.best)
    elif reason == "check_passed":  # the new anchor: the best that passed this check
        _copy_atomic(run.best, run.anchor)
    return promote, reason


def _continuous_gate(
    cfg: YatzyConfig, settings: SearchSettings, run: RunDir, it: int, report: Reporter
) -> dict:
    """``gate.mode: continuous``: promote every candidate; every ``check_every`` iterations the
    candidate first plays the anchor (the best at the last check; the initial network before
    the first) over ``check_games`` fresh paired games and a significant loss of points rolls
    the best back to the anchor instead
    (:func:`~leaguezero.yatzy.train.evaluation.gate.run_check`)."""
    if it % cfg.gate.check_every:
        return {"promote": True, "reason": "continuous"}
    from leaguezero.yatzy.train.evaluation.gate import check_seeds, run_check

    if not run.anchor.exists():
        _copy_atomic(run.models / "best_0000.pt", run.anchor)
    settings = settings.evaluation(cfg.gate.sims)
    cand = ModelAgent.from_settings(run.candidate(it), settings)
    anchor = ModelAgent.from_settings(run.anchor, settings)
    seeds = check_seeds(cfg.gate.seed_set, it, cfg.gate.check_games // 2)
    report("gate", 0, 2 * len(seeds))
    result = run_check(cand, anchor, seeds, progress=lambda n: report("gate", n, 0))
    return result.to_dict()


def train_settings(cfg: YatzyConfig, seed: int, it: int = 1) -> TrainSettings:
    """The trainer's settings for iteration ``it`` of ``cfg`` (its ``train`` section: the lr
    schedule's value at ``it``) with ``seed``."""
    return TrainSettings(
        steps=cfg.train.steps, batch_size=cfg.train.batch_size,
        lr=cfg.train.lr_at(it, cfg.run.iterations),
        weight_decay=cfg.train.weight_decay, value_lambda=cfg.train.value_lambda,
        aux_margin_lambda=cfg.train.aux_margin_lambda if cfg.model.margin_head else 0.0,
        q_weight=cfg.train.q_weight, seed=seed, device=cfg.run.device,
    )  # fmt: skip


def newest_iteration(replay: Path) -> int:
    """The highest NNNN of the ``iter_NNNN`` folders under ``replay``; ReplayError if none."""
    iters = sorted(int(p.name[5:]) for p in replay.glob("iter_*") if p.name[5:].isdigit())
    if not iters:
        raise ReplayError(f"{replay} holds no iter_NNNN replay folders")
    return iters[-1]


def train_from(
    cfg: YatzyConfig, best: Path, replay: Path, it: int | None, seed: int, report: Reporter
) -> tuple[object, CheckpointMeta, list[int], TrainReport]:
    """Train a candidate from the ``best`` checkpoint on the replay window ending at iteration
    ``it`` (None: the newest under ``replay``) with a fresh optimizer; returns (the trained
    model, ``best``'s checkpoint meta, the window, the trainer's report). Nothing is saved."""
    model, meta = load_yatzy_model(best, cfg.run.device, kind=cfg.search.kind)
    last = newest_iteration(replay) if it is None else it
    window = window_iterations(replay, last, cfg.train.window_at(last, cfg.run.iterations))
    data = load_window(replay, window, shard_schema(cfg.search.kind))
    settings = train_settings(cfg, seed, last)
    report("train", 0, settings.steps)
    rep = train_candidate(model, data, settings, progress=lambda s, _l: report("train", 1, 0))
    return model, meta, window, rep


def train_phase(cfg: YatzyConfig, run: RunDir, it: int, report: Reporter) -> dict:
    """Train iteration ``it``'s candidate from the best net on the replay window; writes
    ``models/candidate_NNNN.pt`` and returns the phase record (a Ray task can run it)."""
    model, _, window, rep = train_from(
        cfg, run.best, run.replay, it, cfg.run.seed * 7919 + it, report
    )
    save_checkpoint(
        run.candidate(it), model, kind=model.kind, kwargs=model.kwargs(),
        schema=checkpoint_schema(cfg.search.kind), train_step=it * cfg.train.steps,
        extra={"iteration": it, "window": window, "config": cfg.model_dump(mode="json"),
               "lineage": checkpoint_lineage(run.root, cfg)},
    )  # fmt: skip
    return {**asdict(rep), "window": window, "lr": cfg.train.lr_at(it, cfg.run.iterations)}


def gate_phase(
    cfg: YatzyConfig, settings: SearchSettings, cand: Path, best: Path, seed_folder: Path,
    report: Reporter,
) -> GateResult:  # fmt: skip
    """Gate the ``cand`` checkpoint against ``best`` (both searching with ``settings``, the
    command's, at ``gate.sims``) on the persisted seed set ``gate.seed_set`` under
    ``seed_folder``."""
    from leaguezero.yatzy.train.evaluation.gate import load_seed_set, run_gate

    settings = settings.evaluation(cfg.gate.sims)
    cand_agent = ModelAgent.from_settings(cand, settings)
    best_agent = ModelAgent.from_settings(best, settings)
    seeds = load_seed_set(seed_folder, cfg.gate.seed_set, cfg.gate.max_games // 2)
    report("gate", 0, 2 * len(seeds))
    return run_gate(
        cand_agent, best_agent, cfg.gate, seeds, progress=lambda n: report("gate", n, 0)
    )


def solitaire_phase(
    agents: dict[str, Agent], oracle, games: int, seed: int, report: Reporter
) -> dict[str, dict]:
    """:func:`~leaguezero.yatzy.train.evaluation.solitaire.solitaire_eval` of each agent (``games``
    mirror games on the same seeds), by name; the per-board scores stay in each result."""
    from leaguezero.yatzy.train.evaluation.solitaire import solitaire_eval

    out: dict[str, dict] = {}
    for name, agent in agents.items():
        out[name] = solitaire_eval(agent, oracle, games, seed)
        report("eval", games, 0)
    return out


def guardrail_ok(cfg: YatzyConfig, results: dict) -> bool | None:
    """The promotion guardrail on solitaire results (``oracle_eval.guardrail_delta``): False
    when the candidate's mean is more than delta points below the best's; None when it does not
    apply (no delta, or no candidate or best result)."""
    delta = cfg.oracle_eval.guardrail_delta
    if delta is None or "candidate" not in results or "best" not in results:
        return None
    return results["candidate"]["mean"] >= results["best"]["mean"] - delta


def local_backend() -> Backend:
    """Self-play worker processes on this machine and the train phase in this process."""
    return Backend("local", run_selfplay_workers, train_phase)


def _evaluate(
    cfg: YatzyConfig, settings: SearchSettings, run: RunDir, it: int, oracle, report: Reporter
) -> dict:
    """Solitaire stats of candidate and best against the oracle, and best vs greedy / oracle."""
    from leaguezero.yatzy.agents.match import play_match
    from leaguezero.yatzy.agents.oracle import OracleAgent
    from leaguezero.yatzy.agents.registry import make_agent

    out: dict = {}
    if oracle is None:
        return out
    settings = settings.evaluation(cfg.oracle_eval.sims)
    seed = cfg.run.seed * 31 + it
    games = cfg.oracle_eval.games
    total = 2 * games + 2 * cfg.oracle_eval.match_games
    report("eval", 0, total)
    if games:  # the per-board scores stay in eval/iter_NNNN.json for the report's histogram
        paths = {"candidate": run.candidate(it), "best": run.best}
        agents = {name: ModelAgent.from_settings(path, settings) for name, path in paths.items()}
        out.update(solitaire_phase(agents, oracle, games, seed, report))
    if cfg.oracle_eval.match_games:
        cand = ModelAgent.from_settings(run.candidate(it), settings)
        for name, opp in (("greedy", make_agent("greedy")), ("oracle", OracleAgent(oracle=oracle))):
            s = play_match(cand, opp, cfg.oracle_eval.match_games, seed).summary
            out[f"vs_{name}"] = s.to_dict()
            report("eval", cfg.oracle_eval.match_games, 0)
    return out


def _flat(record: dict) -> dict:
    """The iteration record with the headline numbers lifted to the top level."""
    out = {"iteration": record["iteration"], "promoted": record.get("promoted"),
           "promotion_reason": record.get("promotion_reason")}  # fmt: skip
    sp = record.get("selfplay", {})
    tr = record.get("train", {})
    gt = record.get("gate", {})
    ev = record.get("eval", {})
    out.update(
        selfplay_games=sp.get("games"), sims_per_s=sp.get("sims_per_s"),
        decisions_per_s=sp.get("decisions_per_s"), fallbacks=sp.get("fallbacks"),
        loss_policy=tr.get("loss_policy"), loss_value=tr.get("loss_value"),
        loss_margin=tr.get("loss_margin"), loss_total=tr.get("loss_total"),
        gate_win_rate=gt.get("a_win_rate"), gate_win_rate_se=gt.get("a_win_rate_se"),
        gate_games=gt.get("games"), gate_score_diff=gt.get("score_diff_mean"),
        gate_score_diff_se=gt.get("score_diff_se"),
    )  # fmt: skip
    cand = ev.get("candidate", {})
    out.update(
        solitaire_mean=cand.get("mean"), solitaire_bonus_rate=cand.get("bonus_rate"),
        oracle_match_rate=cand.get("oracle_match_rate"),
        mean_regret_per_game=cand.get("mean_regret_per_game"),
        best_solitaire_mean=ev.get("best", {}).get("mean"),
        win_rate_vs_greedy=ev.get("vs_greedy", {}).get("a_win_rate"),
        win_rate_vs_oracle=ev.get("vs_oracle", {}).get("a_win_rate"),
    )  # fmt: skip
    detail = dict(record)
    if "eval" in detail:  # per-board score lists live in eval/iter_NNNN.json, not in the log
        detail["eval"] = {
            k: {kk: vv for kk, vv in v.items() if kk != "scores"} if isinstance(v, dict) else v
            for k, v in detail["eval"].items()
        }
    out["detail"] = detail
    return out
