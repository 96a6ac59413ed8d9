"""The Yatzy AlphaZero config: one pydantic model per section, loaded from ``configs/*.yaml``.

Each field's description is its documentation (``yz config show --help`` and
docs/reference/config.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from leaguezero.common.config import Section, load_config, move_renamed_keys
from leaguezero.league.config import LeagueSection as SharedLeagueSection

# Old dotted key -> its new name (one vocabulary with Diplomacy's config); old configs and run
# config.yaml files keep loading, with a warning.
RENAMED_KEYS = {"run.torch_threads": "run.threads"}

# The utility's margin scale (``train.margin_scale``'s default): the one place it is written;
# the search kernels' and agents' defaults read it here.
MARGIN_SCALE = 50.0


class RunSection(Section):
    """Run identity, seeds and devices."""

    name: str = Field("yatzy", description="Run name, written into logs and checkpoints.")
    seed: int = Field(0, ge=0, description="Master seed; every other seed derives from it.")
    iterations: int = Field(60, ge=1, description="Self-play -> train -> gate iterations.")
    device: Literal["cpu", "cuda"] = Field("cpu", description="Torch device for net work.")
    threads: int = Field(
        1, ge=1, description="Torch threads per process (1 when processes share cores)."
    )
    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where self-play workers and the trainer run: local processes, or Ray "
        "actors/tasks (extra 'ray'; docs/guides/cluster.md).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster for backend ray: host:port, 'auto', or null (RAY_ADDRESS, the "
        "cluster `leaguezero cluster start` started, else a private local one).",
    )


class SearchSection(Section):
    """Which search plays and is trained: the turn search or PUCT (docs/reference/search.md).

    PUCT searches a tree with sampled dice; the turn search plays each turn exactly (a DP over
    the dice) from a network's values of the next turn starts (docs/reference/turn_search.md).
    Both use ``mcts.margin_utility`` to mix the value and margin heads into one utility.
    """

    kind: Literal["turn", "puct"] = Field(
        "turn",
        description="turn: exact play inside a turn, learned values between turns (feature "
        "schema 2); puct: PUCT with chance nodes (schema 1, the mcts section).",
    )
    temperature: float = Field(
        0.0,
        ge=0,
        description="turn: self-play samples its moves from a softmax over action values at "
        "this temperature (utility units; ~0.01 = one point) for the first temperature_turns "
        "turns; 0 = greedy.",
    )
    temperature_turns: int = Field(
        15, ge=0, le=15, description="turn: turns per player played with temperature."
    )
    td_lambda: float = Field(
        0.7,
        ge=0,
        le=1,
        description="turn: a turn start's target q is the TD(lambda) return G_t = (1 - lambda) * "
        "backup_t + lambda * (-G_t+1), G after the last turn = the final utility: 0 = the "
        "one-turn DP backup alone, 1 = the game outcome (train.q_weight then blends in z).",
    )
    target_depth2_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="turn: share of self-play turn starts whose backup is two turns deep (the "
        "opponent's next turn searched exactly over the network's values; ~100x the "
        "evaluations of a one-turn backup); play itself stays one turn deep. 0 = off.",
    )
    depth: int = Field(
        1,
        ge=1,
        le=2,
        description="turn: how deep checkpoint agents search when they play (gate, evaluation, "
        "yz match / play, the league): 1 = the network values the next turn starts; 2 = the "
        "opponent's next turn too, exactly (~100x the evaluations). Self-play plays one turn "
        "deep (target_depth2_share deepens its targets). Must be 1 with search.kind puct.",
    )


class MctsSection(Section):
    """PUCT search (docs/reference/design.md#puct-search)."""

    c_puct: float = Field(
        1.0, gt=0, description="PUCT exploration constant (Q in [0, 1] with normalize_q)."
    )
    budget_reroll: int = Field(
        64, ge=1, description="Simulations per decision while rerolls remain."
    )
    budget_mark: int = Field(32, ge=1, description="Simulations per decision with no rerolls.")
    dirichlet_alpha: float = Field(0.3, gt=0, description="Root noise alpha (self-play only).")
    dirichlet_epsilon: float = Field(
        0.25, ge=0, le=1, description="Root noise weight (self-play only; 0 disables)."
    )
    temperature: float = Field(
        1.0, ge=0, description="Temperature for sampling the executed move (not the target)."
    )
    temperature_decisions: int = Field(
        8, ge=0, description="Decisions per player sampled with temperature; then greedy."
    )
    max_inflight_per_game: int = Field(
        1, ge=1, description="Pending leaf evaluations per tree (virtual loss when > 1)."
    )
    virtual_loss: float = Field(1.0, ge=0, description="Virtual loss per pending visit.")
    normalize_q: bool = Field(
        True,
        description="Min-max normalise Q values to [0, 1] inside each node before PUCT (MuZero); "
        "false uses raw utilities.",
    )
    margin_utility: float = Field(
        1.0,
        ge=0,
        description="Search value = (win + w * tanh(margin / train.margin_scale)) / (1 + w); 0 = "
        "pure win/loss.",
    )


class SelfPlaySection(Section):
    """Self-play workers and replay shards (docs/reference/design.md#self-play-and-parallelism)."""

    games_per_iteration: int = Field(1024, ge=2, description="Games generated per iteration.")
    concurrent_games: int = Field(
        256, ge=1, description="Games run in lockstep per worker (batch size of leaf evals)."
    )
    workers: int = Field(1, ge=1, description="Self-play worker processes.")
    infer: str = Field(
        "local",
        description="Evaluator: 'local' (in-process model) or unix:///path | tcp://host:port.",
    )
    shard_samples: int = Field(
        4096, ge=1, description="Samples per replay shard file (written atomically)."
    )
    root_log_rate: float = Field(
        0.02, ge=0, le=1, description="Fraction of root decisions logged to mcts_roots.ndjson."
    )
    inference_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Forward dtype of the in-process self-play network: auto = bfloat16 on CUDA "
        "and on CPUs with AMX/AVX512-BF16 (~4x faster, values within ~1e-3), else float32. "
        "Gating and evaluation always use float32.",
    )


class ModelSection(Section):
    """The network: residual MLP or board towers, with value and margin heads."""

    hidden: int = Field(256, ge=8, description="Width of the residual MLP trunk.")
    blocks: int = Field(2, ge=0, description="Residual blocks in the trunk.")
    margin_head: bool = Field(True, description="Train the auxiliary score-margin head.")
    arch: Literal["auto", "resmlp", "board_towers"] = Field(
        "auto",
        description="resmlp: the residual MLP (both searches); board_towers: one tower shared by "
        "both boards plus a head (turn search only; blocks unused); auto: board_towers for the "
        "turn search, resmlp for PUCT.",
    )


class TrainSection(Section):
    """Trainer: candidate initialised from best, fresh optimizer."""

    steps: int = Field(500, ge=1, description="Optimizer steps per iteration.")
    batch_size: int = Field(512, ge=1, description="Samples per optimizer step.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    weight_decay: float = Field(1e-4, ge=0, description="AdamW weight decay.")
    window_iterations: int = Field(
        4, ge=1, description="Replay window: shards of the last N iterations."
    )
    lr_final: float | None = Field(
        1e-4,
        gt=0,
        description="null: a constant lr; else the lr of iteration i falls from lr to lr_final "
        "along a half cosine over run.iterations (each iteration's optimizer is fresh).",
    )
    window_final: int | None = Field(
        16,
        ge=1,
        description="null: a fixed window; else the window grows linearly from "
        "window_iterations at the first iteration to window_final at run.iterations.",
    )
    value_lambda: float = Field(1.0, ge=0, description="Weight of the value MSE loss.")
    aux_margin_lambda: float = Field(
        0.25, ge=0, description="Weight of the margin MSE loss (when margin_head)."
    )
    margin_scale: float = Field(
        MARGIN_SCALE, gt=0, description="z_margin = tanh(score_diff / margin_scale)."
    )
    q_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Value targets = (1 - q_weight) * game outcome + q_weight * q, q = the root "
        "search value (puct; 0.5 works there) or the TD(lambda) return (turn, which already "
        "holds the outcome); 0 = AlphaZero's outcome only.",
    )

    def lr_at(self, it: int, iterations: int) -> float:
        """The learning rate of iteration ``it`` (1-based) of a run of ``iterations``."""
        if self.lr_final is None or iterations <= 1:
            return self.lr
        t = _run_fraction(it, iterations)
        return self.lr_final + (self.lr - self.lr_final) * 0.5 * (1 + math.cos(math.pi * t))

    def window_at(self, it: int, iterations: int) -> int:
        """The replay window (iterations) of iteration ``it`` of a run of ``iterations``."""
        if self.window_final is None or iterations <= 1:
            return self.window_iterations
        t = _run_fraction(it, iterations)
        return round(self.window_iterations + (self.window_final - self.window_iterations) * t)


def _run_fraction(it: int, iterations: int) -> float:
    """How far iteration ``it`` (1-based) is through a run of ``iterations`` > 1: 0 at the
    first, 1 at the last and after it (a resumed run given more iterations stays at 1)."""
    return min(max(it - 1, 0), iterations - 1) / (iterations - 1)


class GateSection(Section):
    """Paired, side-swapped gating with a sequential test, or continuous promotion
    with a periodic regression check (docs/guides/alphazero.md#promotion)."""

    mode: Literal["sprt", "continuous"] = Field(
        "continuous",
        description="sprt: each candidate plays the best (max_games, sequential test) and is "
        "promoted if it wins; continuous: every candidate is promoted (AlphaZero) and every "
        "check_every iterations the best plays the anchor (the best of the last check) over "
        "check_games fresh paired games — significantly fewer points (z < -2) rolls back.",
    )
    check_every: int = Field(
        10, ge=1, description="continuous: iterations between regression checks."
    )
    check_games: int = Field(
        2000, ge=2, description="continuous: paired games of each regression check."
    )

    @property
    def continuous(self) -> bool:
        """Whether every candidate is promoted (``mode: continuous``), parsed here once."""
        return self.mode == "continuous"

    max_games: int = Field(
        400, ge=2, description="Most gating games (pairs of side-swapped games = max/2)."
    )
    min_games: int = Field(200, ge=2, description="Games before the sequential test may stop.")
    threshold: float = Field(
        0.5, ge=0, le=1, description="Promote when the candidate's win rate exceeds this."
    )
    sprt_elo0: float = Field(0.0, description="SPRT null hypothesis (Elo of cand vs best).")
    sprt_elo1: float = Field(15.0, description="SPRT alternative hypothesis (Elo).")
    sprt_alpha: float = Field(0.05, gt=0, lt=0.5, description="SPRT false-promotion rate.")
    sprt_beta: float = Field(0.05, gt=0, lt=0.5, description="SPRT missed-promotion rate.")
    seed_set: str = Field("dev-v1", description="Name of the persisted gating seed set.")
    sims: int = Field(
        16, ge=0, description="Search budget per decision in gating games (0 = raw policy)."
    )


class OracleEvalSection(Section):
    """Solitaire evaluation against the exact oracle (docs/reference/oracle.md)."""

    games: int = Field(
        50, ge=0, description="Mirror-match games (2 boards each) per agent; 0 skips."
    )
    match_games: int = Field(
        100, ge=0, description="Games of best vs greedy and vs oracle per iteration; 0 skips."
    )
    sims: int = Field(16, ge=0, description="Search budget per decision (0 = raw policy).")
    guardrail_delta: float | None = Field(
        None,
        description="Block promotion if the candidate's solitaire mean drops by more (points).",
    )


class InferSection(Section):
    """Batched inference server and client (docs/reference/inference.md)."""

    bind: str = Field(
        "unix://yatzy.sock",
        description="Inference server address (a bare unix:// name lives in this user's private "
        "runtime directory: $XDG_RUNTIME_DIR/leaguezero or ~/.leaguezero/run).",
    )
    max_batch: int = Field(256, ge=1, description="Server flushes a batch at this size...")
    max_wait_us: int = Field(500, ge=0, description="...or when the oldest request is this old.")
    eager_flush: bool = Field(
        True,
        description="...or at once when every connection using the model has a request queued "
        "(false: a fixed batching window, max_batch / max_wait_us only).",
    )
    forward_on: Literal["auto", "loop", "thread"] = Field(
        "auto",
        description="Server: run forward passes on the event loop's thread (loop) or on one "
        "executor thread (thread); auto: loop on a CPU, thread on CUDA "
        "(docs/reference/inference.md).",
    )
    max_pending_total: int = Field(
        4096, ge=1, description="Client backpressure: most requests in flight per worker."
    )
    max_connections: int = Field(
        128, ge=1, description="Server: most client connections (more are answered BUSY)."
    )
    max_connections_per_peer: int = Field(
        64,
        ge=1,
        description="Server: most connections of one peer (a user on Unix and loopback TCP, "
        "else a remote address); silent connections give way to newcomers first.",
    )
    handshake_timeout_s: float = Field(
        5.0,
        ge=0,
        description="Server: close a connection that has not completed a frame this many "
        "seconds after it opened (0: never).",
    )
    max_held_mb: int = Field(
        256,
        ge=1,
        description="Server: most MiB of queued requests and unread replies over all "
        "connections; past it the connection holding the most is closed (its client reconnects).",
    )
    max_forward_mb: int = Field(
        256,
        ge=1,
        description="Server: most MiB one forward pass may take (rows x the model's estimated "
        "bytes per row); a request whose forward pass would take more is refused OVER_BUDGET.",
    )


class LeagueSection(SharedLeagueSection):
    """League training (docs/guides/yatzy_league.md): PFSP opponents, checkpoint schedule, async Elo."""  # noqa: E501

    enabled: bool = Field(
        False, description="Train the hero against league opponents (also: yz run --league)."
    )
    mirror_both_seats: bool = Field(
        True, description="Mirror games record both seats (both are the searched hero)."
    )
    opponent_sims: int = Field(
        0, ge=0, description="Search budget of past-checkpoint opponents (0 = raw policy)."
    )
    eval_every: int = Field(1, ge=1, description="Rate the new checkpoint every N iterations.")
    eval_games: int = Field(
        40, ge=2, description="Evaluator games per gatekeeper (paired, side-swapped)."
    )
    eval_sims: int = Field(
        0, ge=0, description="Search budget of checkpoints in evaluator games (0 = raw policy)."
    )
    eval_extra_gatekeepers: list[str] = Field(
        ["greedy"],
        description="Baselines added to the evaluator's gatekeepers (random, best, recent).",
    )
    random_elo: float = Field(800.0, description="Initial (anchor) rating of the random bot.")
    greedy_elo: float = Field(1000.0, description="Initial rating of the greedy bot.")
    oracle_elo: float = Field(1400.0, description="Initial rating of the oracle bot.")
    base_model_elo: float = Field(
        800.0, description="Initial rating of base_model (the untrained initial net)."
    )


class YatzyConfig(Section):
    """Everything a Yatzy AlphaZero run needs; ``configs/yatzy_local_cpu.yaml`` is the default."""

    run: RunSection = RunSection()
    search: SearchSection = SearchSection()
    mcts: MctsSection = MctsSection()
    selfplay: SelfPlaySection = SelfPlaySection()
    model: ModelSection = ModelSection()
    train: TrainSection = TrainSection()
    gate: GateSection = GateSection()
    oracle_eval: OracleEvalSection = OracleEvalSection()
    infer: InferSection = InferSection()
    league: LeagueSection = LeagueSection()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return move_renamed_keys(data, RENAMED_KEYS)

    @model_validator(mode="after")
    def _arch_fits_search(self) -> YatzyConfig:
        network_arch(self.model.arch, self.search.kind)
        return self

    @model_validator(mode="after")
    def _depth_fits_search(self) -> YatzyConfig:
        if self.search.depth != 1 and self.search.kind != "turn":
            raise ValueError(
                f"search.depth={self.search.depth} is the turn search's: use search.kind=turn, "
                "or search.depth=1 with PUCT"
            )
        return self


def load_yatzy_config(
    path: str | os.PathLike | None = None, overrides: Sequence[str] = ()
) -> YatzyConfig:
    """The config of a YAML file (None: the defaults) with ``key=value`` overrides; raises
    :class:`~leaguezero.common.config.ConfigError` in one line. Every command and the web app
    read their config here."""
    return load_config(YatzyConfig, path, list(overrides))


def network_arch(arch: str, kind: str) -> str:
    """The network architecture of ``model.arch`` for search ``kind`` (``auto``: board towers for
    the turn search, the residual MLP for PUCT). The one place that holds the rule "board towers
    need the turn search": they read turn starts, which only the turn search records. Raises
    ValueError otherwise."""
    if arch == "auto":
        return "board_towers" if kind == "turn" else "resmlp"
    if arch == "board_towers" and kind != "turn":
        raise ValueError(
            "model.arch=board_towers reads turn starts: use search.kind=turn, or "
            "model.arch=resmlp (or auto) with PUCT"
        )
    return arch
