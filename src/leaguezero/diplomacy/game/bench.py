"""The fixed benchmark suite: a hero one-against-six against each benchmark opponent in turn.

Win rate against a league that keeps changing says little; a fixed suite says how strong an agent
is. Each entry of the suite is an opponent, a *tier* and a *floor*: the hero plays ``games``
games against six copies of the opponent (seats rotated over the seven powers, exactly as
``leaguezero diplomacy eval``), and passes the entry when the 95% interval of its win rate lies
at or above the floor (fails when below it; straddling it is *inconclusive*: a verdict drawn
from a point estimate over a few games would be a coin flip).

Tiers, after the league project this package follows:

- ``trivial`` — ``random_bot``: any agent that has learned anything wins almost every game (≥ 0.95).
- ``heuristic`` — ``chaos_bot``, ``greedy_bot``, ``dumb_bot``: a floor per bot. Parity (one
  seat's fair share, 1/7 ≈ 0.143) against ``dumb_bot`` means "as strong as DumbBot", the field's
  standard baseline; the floors of the weaker bots are set so that ``dumb_bot`` itself passes
  them (docs/results/diplomacy_bench.md has the measurements behind each). The bots' tiers and
  floors are rows of the catalogue's :data:`~leaguezero.diplomacy.game.catalogue.BOT_TABLE`.
- ``checkpoint`` — frozen checkpoints named in the config: parity by default (not weaker than
  that checkpoint).

The same suite is the league evaluator's fixed set of gatekeepers: every evaluation of a
training run plays the challenger against each opponent of :func:`suite_with_checkpoints`
(``bench.checkpoints`` included, :func:`suite_gatekeepers`), and :func:`suite_results` reads
the challenger's win rate per opponent and its floor off those games (informational there:
evaluations play few, often short games;
docs/results/diplomacy_bench.md#the-suite-inside-the-league).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from leaguezero.common.stats import wilson_interval
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import BOT_TABLE, PARITY, AgentSpec
from leaguezero.diplomacy.game.rollout import RolloutResult
from leaguezero.diplomacy.game.seats import AgentResolver
from leaguezero.diplomacy.game.tournament import TournamentResult, run_tournament

BENCH_SCHEMA_VERSION = 2  # 2: each row's 95% interval and verdict, the report's verdict


def verdict(rate: float, games: int, floor: float) -> str:
    """``pass`` when the 95% interval lies at or above ``floor``, ``fail`` when below it, and
    ``inconclusive`` when it straddles the floor (more games would decide)."""
    low, high = wilson_interval(rate, games)
    if low >= floor:
        return "pass"
    if high < floor:
        return "fail"
    return "inconclusive"


@dataclass(frozen=True)
class BenchEntry:
    """One opponent of the suite: the agent, its tier and the hero's floor against it."""

    agent: str
    tier: str  # "trivial" | "heuristic" | "checkpoint"
    floor: float  # the win rate the hero needs against six copies of ``agent``


# Every bot, with its tier and floor from the catalogue's table (BOT_TABLE).
DEFAULT_SUITE: tuple[BenchEntry, ...] = tuple(
    BenchEntry(bot.name, bot.tier, bot.floor) for bot in BOT_TABLE
)


def suite_with_checkpoints(
    checkpoints: Sequence[str], base: Sequence[BenchEntry] = DEFAULT_SUITE
) -> tuple[BenchEntry, ...]:
    """``base`` plus one ``checkpoint`` entry (floor: parity) per frozen checkpoint."""
    return (*base, *(BenchEntry(path, "checkpoint", PARITY) for path in checkpoints))


def suite_gatekeepers(checkpoints: Sequence[str] = ()) -> list[str]:
    """The league names of the suite's opponents (``DEFAULT_SUITE`` plus ``checkpoints``, named
    by their paths as in the bench table): the evaluator's fixed gatekeepers."""
    return [entry.agent for entry in suite_with_checkpoints(checkpoints)]


def suite_results(
    suite: Sequence[BenchEntry], wins: Mapping[str, Sequence[float]]
) -> list[dict[str, Any]]:
    """The challenger's record against each entry of ``suite`` from ``wins`` (its win share of
    each game against six copies of an opponent, by opponent): ``agent``, ``tier``, ``floor``,
    ``games``, ``win_rate`` and ``passed`` (``win_rate >= floor``); an entry without games has
    ``win_rate`` and ``passed`` None. The league evaluator's per-evaluation suite check."""
    rows = []
    for entry in suite:
        played = list(wins.get(entry.agent, ()))
        rate = sum(played) / len(played) if played else None
        rows.append(
            {
                "agent": entry.agent,
                "tier": entry.tier,
                "floor": round(entry.floor, 4),
                "games": len(played),
                "win_rate": None if rate is None else round(rate, 4),
                "passed": None if rate is None else rate >= entry.floor,
            }
        )
    return rows


@dataclass(frozen=True)
class BenchRow:
    """The hero's results against one entry of the suite."""

    agent: str
    tier: str
    floor: float
    games: int
    win_rate: float
    win_se: float  # binomial standard error of the win rate
    mean_score: float
    mean_centers: float
    survival: float  # share of games the hero ended with at least one supply centre
    invalid_orders: int  # orders of any seat the rollout had to replace
    passed: bool  # the point estimate at or above the floor (``verdict`` says how sure)
    solo_rate: float = 0.0  # share of games the hero ended with a solo (>= solo_sc centres)
    most_centres_rate: float = 0.0  # ... with the most centres (a k-way tie counts 1/k)
    hero_llm_invalid: int = 0  # the hero's own illegal order lines (an LLM hero; 0 otherwise)
    hero_llm_missing: int = 0  # ... owed orders it did not write
    hero_llm_truncated: int = 0  # ... answers cut at the token budget
    win_low: float = 0.0  # the win rate's 95% Wilson interval (:func:`wilson_interval`)
    win_high: float = 1.0
    verdict: str = "inconclusive"  # pass | fail | inconclusive (:func:`verdict`)


def bench_row(entry: BenchEntry, result: TournamentResult) -> BenchRow:
    """Summarise the hero's tournament against ``entry`` as a row of the table."""
    report = result.report()
    hero = report["hero"]
    played = len(result.games)
    win_rate = float(hero["win_rate"])
    survived = sum(1 for game in result.games if game.centers[game.hero_power] > 0)
    low, high = wilson_interval(win_rate, played)
    return BenchRow(
        agent=entry.agent,
        tier=entry.tier,
        floor=entry.floor,
        games=played,
        win_rate=win_rate,
        win_se=math.sqrt(win_rate * (1.0 - win_rate) / played),
        mean_score=float(hero["mean_score"]),
        mean_centers=float(hero["mean_centers"]),
        survival=survived / played,
        invalid_orders=int(report["invalid_orders"]),
        passed=win_rate >= entry.floor,
        solo_rate=float(hero["solo_rate"]),
        most_centres_rate=float(hero["most_centres_rate"]),
        hero_llm_invalid=int(report["hero_llm"]["invalid"]),
        hero_llm_missing=int(report["hero_llm"]["missing"]),
        hero_llm_truncated=int(report["hero_llm"]["truncated"]),
        win_low=low,
        win_high=high,
        verdict=verdict(win_rate, played, entry.floor),
    )


def run_bench(
    cfg: DiplomacyConfig,
    hero: AgentSpec,
    suite: Sequence[BenchEntry],
    games: int,
    *,
    agents: Mapping[str, AgentSpec],
    resolver: AgentResolver | None = None,
    on_game: Callable[[str, RolloutResult], None] | None = None,
) -> list[BenchRow]:
    """Play ``hero`` against each entry of ``suite`` (``games`` games each) and return the rows.

    ``agents``: each entry's agent parsed (by :attr:`BenchEntry.agent`, as the command line
    parsed it). Every entry replays the same seeds (``cfg.run.seed``), so two heroes benched
    with one seed meet the same dice of fate. ``on_game(agent, game)`` is called after each
    game (progress).
    Raises ``ValueError`` for an empty suite or ``games < 1``.
    """
    if not suite:
        raise ValueError("the benchmark suite is empty")
    rows = []
    for entry in suite:
        result = run_tournament(
            cfg,
            hero,
            [agents[entry.agent]],
            games,
            resolver=resolver,
            on_game=None if on_game is None else (lambda g, a=entry.agent: on_game(a, g)),
        )
        rows.append(bench_row(entry, result))
    return rows


def bench_report(hero: str, seed: int, games: int, rows: Sequence[BenchRow]) -> dict[str, Any]:
    """The ``leaguezero diplomacy bench --json`` object: ``verdict`` is ``fail`` when a row
    fails, else ``inconclusive`` when a row is, else ``pass``; ``passed``: every row passed."""
    verdicts = {row.verdict for row in rows}
    overall = (
        "fail" if "fail" in verdicts else "inconclusive" if "inconclusive" in verdicts else "pass"
    )
    return {
        "schema_version": BENCH_SCHEMA_VERSION,
        "hero": hero,
        "seed": seed,
        "games_per_opponent": games,
        "parity": PARITY,
        "passed": overall == "pass",
        "verdict": overall,
        "interval": "95% Wilson score interval of the win rate (win_low, win_high); a row "
        "passes when it lies at or above the floor, fails when below, else is inconclusive",
        "rows": [asdict(row) for row in rows],
    }
