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

prints, per opponent and game length, the mean per-game difference A − B ± its paired SE over
the games of every cell both have (cells saved before ``wins`` existed have none and are
skipped).

A measurement too long for one sitting (an LLM's 280 games are hours of CPU) goes in chunks:
``--chunks 10 --games 28`` plays ten cells of 28 games at seeds S..S+9, every agent's chunk
before the next chunk, so a stopped run keeps whole, paired chunks and the next run plays only
the rest; the table pools a line's chunks. ``--eval-arg`` passes more arguments to the eval
command (not part of a cell's key), e.g. an LLM hero's constrained decoding, many games a batch:

    python scripts/figures/diplomacy_table.py --seed S --games 28 --chunks 10 --years 3 \
        --out smol.jsonl --agents pretrained-smol,ADAPTER_FOLDER \
        --eval-arg=--set --eval-arg=llm.mode=constrained \
        --eval-arg=--concurrent-games --eval-arg=7
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diplomacy_eval import run_eval


def measure(
    agent: str, opponent: str, years: int, games: int, seed: int, extra: tuple[str, ...] = ()
) -> dict:
    """One cell: the eval command's hero figures and its CPU per game."""
    result, cpu = run_eval(agent, opponent, games, seed, years, per_game=True, extra=extra)
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
        "centers": [g["centers"][g["hero_power"]] for g in result["per_game"]],
    }


def _win_share(game: dict) -> float:
    """The hero seat's win in one game: 1 for the single highest score, 1/k for a k-way tie."""
    scores = game["scores"]
    best = max(scores.values())
    top = [p for p, v in scores.items() if v == best]
    return 1.0 / len(top) if game["hero_power"] in top else 0.0


def paired(rows: list[dict], a: str, b: str) -> list[str]:
    """A − B over the games both played, pooled per (opponents, game length) across the cells
    (seeds, chunks) both have: the mean per-game difference of the win share ± its SE (sample
    std / sqrt(n)), and of the hero's final supply centres where both cells recorded them (a
    finer measure of the same games: most three-year games have no single winner)."""
    lines = []
    for key, unit in (("wins", ""), ("centers", " SC")):
        lines += _paired_on(rows, a, b, key, unit)
    return lines


def _paired_on(rows: list[dict], a: str, b: str, key: str, unit: str) -> list[str]:
    cells: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r["agent"] in (a, b) and r.get(key):
            cell = (r["opponent"], r["years"], r["games"], r["seed"])
            cells.setdefault(cell, {})[r["agent"]] = r[key]
    pooled: dict[tuple, tuple[list[float], list[int]]] = {}
    for (opponent, years, _games, seed), by in sorted(cells.items()):
        if len(by) < 2 or len(by[a]) != len(by[b]):
            continue
        diff, seeds = pooled.setdefault((opponent, years), ([], []))
        diff.extend(x - y for x, y in zip(by[a], by[b], strict=True))
        seeds.append(seed)
    lines = []
    for (opponent, years), (diff, seeds) in sorted(pooled.items()):
        n = len(diff)
        mean = sum(diff) / n
        var = sum((d - mean) ** 2 for d in diff) / max(n - 1, 1)
        se = (var / n) ** 0.5
        where = (
            f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} cells, seeds {sorted(seeds)}"
        )
        what = "win share" if key == "wins" else "supply centres"
        lines.append(
            f"{a} - {b} ({what}): six {opponent}, {years} years, {n} games, {where}: "
            f"{mean:+.3f}{unit} ± {se:.3f}{unit} ({mean / se if se else float('inf'):+.1f} SE)"
        )
    return lines


def pool(cells: list[dict]) -> dict:
    """Cells of one agent, opponent and length (chunks of one measurement) as one: means
    weighted by games, the win rate's SE from the cells' (independent games)."""
    n = sum(c["games"] for c in cells)

    def mean(key: str) -> float:
        return sum(c[key] * c["games"] for c in cells) / n

    se = sum((c["win_rate_se"] * c["games"]) ** 2 for c in cells) ** 0.5 / n
    names = ("win_rate", "mean_centers", "solo_rate", "cpu_s_per_game")
    return {"games": n, "win_rate_se": se, **{k: mean(k) for k in names}}


def markdown(rows: list[dict]) -> str:
    """One line per agent and opponent, a column per game length (chunks pooled)."""
    years = sorted({r["years"] for r in rows})
    head = "| agent | opponents | " + " | ".join(f"{y} years" for y in years) + " |"
    lines = [head, "|---|---|" + "---|" * len(years)]
    keys = sorted({(r["agent"], r["opponent"]) for r in rows}, key=lambda k: (k[1], k[0]))
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["agent"], r["opponent"], r["years"]), []).append(r)
    for agent, opponent in keys:
        texts = []
        for y in years:
            if (agent, opponent, y) not in cells:
                texts.append("—")
                continue
            r = pool(cells[(agent, opponent, y)])
            texts.append(
                f"{r['win_rate']:.3f} ± {r['win_rate_se']:.3f} ({r['games']} games); "
                f"{r['mean_centers']:.1f} SC; solo {r['solo_rate']:.3f}; "
                f"{r['cpu_s_per_game']:.1f} CPU-s"
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
    parser.add_argument(
        "--chunks",
        type=int,
        default=1,
        help="K cells of --games each at seeds SEED..SEED+K-1, every agent in a chunk before the "
        "next: a long measurement (an LLM's) resumes chunk by chunk and stays paired",
    )
    parser.add_argument(
        "--eval-arg",
        action="append",
        default=[],
        help="an extra argument of the eval command, repeatable (--eval-arg=--concurrent-games "
        "--eval-arg=8); not part of a cell's key",
    )
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
    seeds = [args.seed + k for k in range(args.chunks)]
    for years in (int(y) for y in args.years.split(",")):
        for opponent in args.opponents.split(","):
            for seed in seeds:
                for agent in args.agents.split(","):
                    if (agent, opponent, years, args.games, seed) in have:
                        continue
                    row = measure(agent, opponent, years, args.games, seed, tuple(args.eval_arg))
                    print(json.dumps(row), flush=True)
                    with args.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    done.append(row)
    print(markdown([r for r in done if r["games"] == args.games and r["seed"] in seeds]))


if __name__ == "__main__":
    main()
