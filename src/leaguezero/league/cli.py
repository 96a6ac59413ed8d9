"""``leaguezero league``: inspect and maintain a run's league (registry, match log, ratings)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from leaguezero.common.cli import fail

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


_NUMBER_KEYS = ("best_elo", "anchor_elo")  # number or null
_TEXT_KEYS = ("run_name", "best_agent", "anchor")  # string or null


def _check_metadata(metadata: dict, where: Path) -> None:
    """Fail with one line when league.json's metadata has a value of the wrong type."""
    for key in _NUMBER_KEYS:
        value = metadata.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise fail(
                f"{where}: metadata.{key} must be a number or null, not {value!r}; fix it or "
                "run  leaguezero league refit  after fixing the anchor"
            )
    for key in _TEXT_KEYS:
        value = metadata.get(key)
        if value is not None and not isinstance(value, str):
            raise fail(f"{where}: metadata.{key} must be a string or null, not {value!r}")


@app.command()
def show(
    run_dir: Path = typer.Argument(..., help="Run directory holding league.json."),
    recent: int = typer.Option(10, help="How many recent matches to list."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
) -> None:
    """Print the agents with ratings and intervals, and the most recent matches.

    With a ``base_model`` agent each rating is also shown relative to it (base_model = 0):
    the "vs base_model" column, ``relative_to`` and each agent's ``elo_relative`` in --json
    (null without base_model)."""
    from leaguezero.league.evaluator import evaluator_paths
    from leaguezero.league.matchlog import MatchLogError, read_matches
    from leaguezero.league.rating import RELATIVE_TO, relative_ratings
    from leaguezero.league.registry import LeagueRegistry, RegistryError
    from leaguezero.league.types import AgentKind

    paths = evaluator_paths(run_dir)
    try:
        state = LeagueRegistry(paths["registry"]).load()
        matches = read_matches(paths["matchlog"])[-recent:] if recent > 0 else []
    except (RegistryError, MatchLogError) as err:
        raise fail(str(err)) from None
    _check_metadata(state.metadata, paths["registry"])
    agents = sorted(state.agents.values(), key=lambda a: -a.elo)
    relative = relative_ratings(state.ratings())
    if as_json:
        out = {
            "metadata": state.metadata,
            "relative_to": None if relative is None else RELATIVE_TO,
            "agents": {
                a.name: {
                    **a.to_dict(),
                    "elo_relative": None if relative is None else round(relative[a.name], 2),
                }
                for a in agents
            },
            "recent_matches": [m.to_dict() for m in matches],
        }
        typer.echo(json.dumps(out, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    meta = state.metadata
    best_elo = "-" if meta.get("best_elo") is None else f"{meta['best_elo']:.0f}"
    console.print(
        f"league [bold]{meta.get('run_name')}[/]: {len(state.checkpoints)} checkpoints, "
        f"{len(state.baselines)} baselines, "
        f"{sum(a.type is AgentKind.EXPLOITER for a in agents)} exploiter snapshots; "
        f"best {meta.get('best_agent')} "
        f"({best_elo}); "
        f"anchor {meta.get('anchor')} = {meta.get('anchor_elo')}"
    )
    columns = ["agent", "type", "elo"] + ([f"vs {RELATIVE_TO}"] if relative is not None else [])
    table = Table(*columns, "interval", "matches", "step", "parent")
    for a in agents:
        interval = "" if a.elo_low is None else f"[{a.elo_low:.0f}, {a.elo_high:.0f}]"
        name = a.name + (" (retired)" if a.extra.get("retired") else "")
        role = a.extra.get("role") if a.type is AgentKind.EXPLOITER else None
        table.add_row(
            name,
            a.type.value + (f" ({role})" if role else ""),
            f"{a.elo:.0f}",
            *([f"{relative[a.name]:+.0f}"] if relative is not None else []),
            interval,
            str(a.matches),
            "" if a.step is None else str(a.step),
            a.parent or "",
        )
    console.print(table)
    if matches:
        recent_table = Table("step", "kind", "seats (agent: score)")
        for m in matches:
            seats = ", ".join(f"{p.agent}: {p.score:g}" for p in m.participants)
            recent_table.add_row(str(m.step), m.kind, seats)
        console.print(recent_table)


@app.command()
def refit(
    run_dir: Path = typer.Argument(..., help="Run directory holding league.json."),
    bootstrap: int = typer.Option(200, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
) -> None:
    """Recompute every rating from the evaluation match log (batch Bradley–Terry refit)."""
    from leaguezero.league.evaluator import evaluator_paths
    from leaguezero.league.matchlog import MatchLogError, read_matches
    from leaguezero.league.rating import fit_ratings
    from leaguezero.league.registry import LeagueRegistry, RegistryError

    paths = evaluator_paths(run_dir)
    try:
        results = read_matches(paths["matchlog"], kind="evaluation")
        registry = LeagueRegistry(paths["registry"])
        with registry.update() as state:
            _check_metadata(state.metadata, paths["registry"])
            if state.anchor is None:
                raise fail("league.json has no rating anchor")
            name, elo = state.anchor
            fit = fit_ratings(results, anchor=name, anchor_elo=elo, bootstrap=bootstrap, seed=seed)
            rated = {n: r for n, r in fit.ratings.items() if fit.games.get(n, 0) > 0}
            intervals = {n: iv for n, iv in fit.intervals().items() if n in rated}
            state.set_ratings(rated, intervals=intervals)
    except (RegistryError, MatchLogError) as err:
        raise fail(str(err)) from None
    typer.echo(f"refit {len(rated)} agents from {len(results)} evaluation matches")


@app.command()
def plot(
    run_dir: Path = typer.Argument(..., help="Run directory holding events.ndjson."),
    out: Path | None = typer.Option(None, help="PNG path (default RUN_DIR/league_elo.png)."),
) -> None:
    """Write the League/Elo_Rating chart (Hero, Past_Best, baselines vs step) as a PNG."""
    from leaguezero.league.evaluator import evaluator_paths
    from leaguezero.league.tracking import plot_elo

    events = evaluator_paths(run_dir)["events"]
    if not events.exists():
        raise fail(f"{events} does not exist; no evaluation has run in {run_dir}")
    typer.echo(str(plot_elo(events, out or Path(run_dir) / "league_elo.png")))


# --kind: the match log's kinds a payoff table reads (None: all).
MATRIX_KINDS = {
    "all": None,
    "training": ("training",),
    "evaluation": ("evaluation",),
    "exploiter": ("exploiter",),  # league.exploiters' training games
}


@app.command()
def matrix(
    run_dir: Path = typer.Argument(..., help="Run directory holding league_matches.ndjson."),
    kind: str = typer.Option(
        "all", help="Which games: all, training, evaluation or exploiter (the match log's kinds)."
    ),
    out: Path | None = typer.Option(
        None, help="Heatmap PNG path (default RUN_DIR/league_matrix.png)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
) -> None:
    """The payoff table of every pair of agents (mean pairwise score of the row against the
    column over the games both played, games, 95% interval), each agent's Elo from league.json
    and its Nash-averaged rating over the table (docs/reference/league.md#the-payoff-table); writes
    a heatmap PNG."""
    from leaguezero.league.evaluator import evaluator_paths
    from leaguezero.league.matchlog import MatchLogError, read_matches
    from leaguezero.league.payoff import nash_average, payoff_table, plot_payoff
    from leaguezero.league.registry import LeagueRegistry, RegistryError

    if kind not in MATRIX_KINDS:
        raise fail(f"--kind {kind!r}: use {', '.join(MATRIX_KINDS)}")
    paths = evaluator_paths(run_dir)
    if not paths["matchlog"].exists():
        raise fail(f"{paths['matchlog']} does not exist: {run_dir} has no recorded games")
    try:
        matches = read_matches(paths["matchlog"])
        state = LeagueRegistry(paths["registry"]).load() if paths["registry"].exists() else None
    except (RegistryError, MatchLogError) as err:
        raise fail(str(err)) from None
    table = payoff_table(matches, kinds=MATRIX_KINDS[kind])
    if not table.agents:
        raise fail(f"{paths['matchlog']} holds no {kind} games between distinct agents")
    nash = nash_average(table)
    elo = state.ratings() if state is not None else {}
    png = plot_payoff(table, out or Path(run_dir) / "league_matrix.png", nash)
    if as_json:
        payload = table.to_dict()
        payload["ratings"] = {name: {"elo": elo.get(name), **nash[name]} for name in table.agents}
        payload["png"] = str(png)
        typer.echo(json.dumps(payload))
        return
    width = max(len(n) for n in table.agents)
    short = [n[:10] for n in table.agents]
    typer.echo(f"{'':{width}}  " + " ".join(f"{s:>10}" for s in short))
    for i, name in enumerate(table.agents):
        cells = [
            "—".rjust(10)
            if i == j or not table.games[i, j]
            else f"{table.mean[i, j]:.2f}/{table.games[i, j]}".rjust(10)
            for j in range(len(table.agents))
        ]
        typer.echo(f"{name:{width}}  " + " ".join(cells))
    typer.echo("cell: the row's mean pairwise score against the column / games both played")
    typer.echo(f"{'agent':{width}}  {'elo':>8}  {'nash avg':>9}  {'nash weight':>11}")
    for name in sorted(table.agents, key=lambda n: -nash[n]["rating"]):
        rating = elo.get(name)
        shown = f"{rating:8.1f}" if rating is not None else f"{'-':>8}"
        typer.echo(
            f"{name:{width}}  {shown}  {nash[name]['rating']:+9.3f}  "
            f"{nash[name]['nash_weight']:11.3f}"
        )
    typer.echo(f"heatmap: {png}")
