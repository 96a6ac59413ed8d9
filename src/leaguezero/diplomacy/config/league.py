"""The ``league`` section of the Diplomacy config: the shared league keys
(:class:`leaguezero.league.config.LeagueSection`) plus the bots' ratings, the evaluator's
Diplomacy keys and the exploiters."""

from __future__ import annotations

from pydantic import Field

from leaguezero.common.config import Section
from leaguezero.league.config import LeagueSection as SharedLeagueSection


class ExploitersSection(Section):
    """Exploiters beside the hero (AlphaStar's roles; docs/reference/league.md#exploiter-roles)."""

    main: int = Field(
        0, ge=0, description="Main exploiters: trained against six copies of the live hero only."
    )
    league: int = Field(
        0, ge=0, description="League exploiters: trained against PFSP draws over the whole pool."
    )
    every: int = Field(
        4,
        ge=2,
        description="Every Nth training step trains an exploiter (in turn) instead of the hero: "
        "exploiters take 1/N of the run's games and updates, so a run with them costs what one "
        "without them does.",
    )
    win_share: float = Field(
        0.3,
        gt=0,
        le=1,
        description="An exploiter whose win share over its last `window` training games "
        "reaches this joins the pool as a frozen snapshot; a main exploiter then resets to its "
        "initial weights (parity is 1/7).",
    )
    window: int = Field(16, ge=1, description="Training games the win_share rule looks back on.")
    max_steps: int = Field(
        25,
        ge=1,
        description="After this many of its own steps without reaching win_share an exploiter "
        "joins the pool anyway; a main exploiter resets (a league exploiter goes on).",
    )


class LeagueSection(SharedLeagueSection):
    """League around the hero: baselines, PFSP opponents, checkpoint schedule, async evaluator."""

    base_model_elo: float = Field(1000.0, description="Initial rating of base_model (step 0).")
    random_bot_elo: float = Field(800.0, description="Rating of random_bot, the fixed anchor.")
    chaos_bot_elo: float = Field(900.0, description="Initial rating of chaos_bot.")
    greedy_bot_elo: float = Field(
        1100.0,
        description="Initial rating of greedy_bot (measured between chaos_bot and dumb_bot, "
        "docs/results/diplomacy_bench.md).",
    )
    dumb_bot_elo: float = Field(
        1300.0,
        description="Initial rating of dumb_bot (DumbBot, the field's standard baseline; measured "
        "about 500 above random_bot in a mixed table, docs/reference/dumb_bot.md).",
    )
    eval_every: int = Field(
        50, ge=1, description="Run the async evaluator every N steps (on the newest checkpoint)."
    )
    eval_games: int = Field(
        7, ge=1, description="Evaluator games per gatekeeper (the challenger vs six clones)."
    )
    eval_all_baselines: bool = Field(
        True,
        description="Add every baseline (base_model too) to the evaluator's gatekeepers: random, "
        "best, recent and the benchmark suite's opponents, which are always played "
        "(docs/results/diplomacy_bench.md).",
    )
    eval_greedy: bool = Field(
        True, description="Learned agents play their most probable orders in evaluations."
    )
    exploiters: ExploitersSection = ExploitersSection()  # off by default (the spec's recipe)
