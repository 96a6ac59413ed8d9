"""Issue 53's table: agents one against six opponents at several game lengths, measured after
training, with win rate ± SE, mean centres, solo and most-centres shares and CPU per game.

    python scripts/figures/diplomacy_table.py --seed S --games 280 --years 5,10,15 \\
        --opponents dumb_bot,pretrained --out table.jsonl \\
        --agents pretrained,runs/seq/ckpt.pt,'search:runs/seq/ckpt.pt?k=8'

Each cell is ``leaguezero diplomacy eval --hero AGENT --opponents OPP --games G --seed S --set
max_years=Y --set run.threads=1 --no-save --json`` (seats rotated over the seven powers, learned
agents greedy), so every agent plays the same game setups in a column (paired across agents).
Cells are appended to ``--out`` as JSON lines as they finish and cells already there are not
played again: an interrupted table resumes (across sessions too, if the file is kept). CPU per
game is the eval child's user + system time over its games (its start included). Prints the
markdown table at the end.

Each new cell also keeps its per-game hero win shares (``wins``: 1 for a single highest score,
1/k for a k-way tie, in game order), so two agents measured on the same games compare paired:

    python scripts/figures/diplomacy_table.py --out table.jsonl --paired A,B

prints, for every (opponent, years, games, seed) cell both have, the mean per-game difference
A − B ± its paired SE (cells saved before ``wins`` existed have none and are skipped).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diplomacy_eval import run_eval


def measure(agent: str, opponent: str, years: int, games: int, seed: int) -> dict:
    """One cell: the eval command's hero figures and its CPU per game."""
    result, cpu = run_eval(agent, opponent, games, seed, years, per_game=True)
    hero = result["hero"]
    n = hero["seats"]
    return {
        "agent": agent,
        "opponent": opponent,
        "years": years,
        "games": n,
        "seed": seed,
        "win_rate": hero["win_rate"],
        "win_rate_se": hero["win_rate_se"],
        "mean_centers": hero["mean_centers"],
        "solo_rate": hero["solo_rate"],
        "most_centres_rate": hero["most_centres_rate"],
        "cpu_s_per_game": round(cpu / max(n, 1), 2),
        "wins": [_win_share(g) for g in result["per_game"]],
    }


def _win_share(game: dict) -> float:
    """The hero seat's win in one game: 1 for the single highest score, 1/k for a k-way tie."""
    scores = game["scores"]
    best = max(scores.values())
    top = [p for p, v in scores.items() if v == best]
    return 1.0 / len(top) if game["hero_power"] in top else 0.0


def paired(rows: list[dict], a: str, b: str) -> list[str]:
    """A − B per shared cell: mean per-game difference ± its SE (sample std / sqrt(n))."""
    cells: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r["agent"] in (a, b) and r.get("wins"):
            key = (r["opponent"], r["years"], r["games"], r["seed"])
            cells.setdefault(key, {})[r["agent"]] = r["wins"]
    lines = []
    for (opponent, years, _games, seed), by in sorted(cells.items()):
        if len(by) < 2 or len(by[a]) != len(by[b]):
            continue
        diff = [x - y for x, y in zip(by[a], by[b], strict=True)]
        n = len(diff)
        mean = sum(diff) / n
        var = sum((d - mean) ** 2 for d in diff) / max(n - 1, 1)
        se = (var / n) ** 0.5
        lines.append(
            f"{a} - {b}: six {opponent}, {years} years, {n} games, seed {seed}: "
            f"{mean:+.3f} ± {se:.3f} ({mean / se if se else float('inf'):+.1f} SE)"
        )
    return lines


def markdown(rows: list[dict]) -> str:
    """One line per agent and opponent, a column per game length."""
    years = sorted({r["years"] for r in rows})
    head = "| agent | opponents | " + " | ".join(f"{y} years" for y in years) + " |"
    lines = [head, "|---|---|" + "---|" * len(years)]
    keys = sorted({(r["agent"], r["opponent"]) for r in rows}, key=lambda k: (k[1], k[0]))
    cells = {(r["agent"], r["opponent"], r["years"]): r for r in rows}
    for agent, opponent in keys:
        texts = []
        for y in years:
            r = cells.get((agent, opponent, y))
            texts.append(
                "—"
                if r is None
                else (
                    f"{r['win_rate']:.3f} ± {r['win_rate_se']:.3f}; {r['mean_centers']:.1f} SC; "
                    f"solo {r['solo_rate']:.3f}; {r['cpu_s_per_game']:.1f} CPU-s"
                )
            )
        lines.append(f"| `{agent}` | six `{opponent}` | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", help="comma-separated agent specs (required to measure)")
    parser.add_argument("--opponents", default="dumb_bot", help="comma-separated opponents")
    parser.add_argument("--years", default="5,10,15", help="comma-separated game lengths")
    parser.add_argument("--games", type=int, default=280)
    parser.add_argument("--seed", type=int, help="drawn after training (required to measure)")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--paired", help="A,B: print A - B paired over the cells both have")
    args = parser.parse_args()
    done: list[dict] = []
    if args.out.exists():
        done = [json.loads(x) for x in args.out.read_text().splitlines() if x.startswith("{")]
    if args.paired:
        a, _, b = args.paired.partition(",")
        print("\n".join(paired(done, a, b)) or f"no cell has per-game wins of both {a} and {b}")
        return
    if not args.agents or args.seed is None:
        parser.error("--agents and --seed are needed to measure (or --paired A,B to compare)")
    have = {(r["agent"], r["opponent"], r["years"], r["games"], r["seed"]) for r in done}
    for years in (int(y) for y in args.years.split(",")):
        for opponent in args.opponents.split(","):
            for agent in args.agents.split(","):
                if (agent, opponent, years, args.games, args.seed) in have:
                    continue
                row = measure(agent, opponent, years, args.games, args.seed)
                print(json.dumps(row), flush=True)
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                done.append(row)
    print(markdown([r for r in done if r["games"] == args.games and r["seed"] == args.seed]))


if __name__ == "__main__":
    main()
