"""Summarise the league ablation (scripts/league_ablation.sh, scripts/league_ablation_eval.sh)
as the markdown tables of docs/reference/league.md "Does the league pay?".

    python scripts/league_ablation_table.py OUT_DIR

Strength: each hero's win share against six dumb_bots (a seat wins when its final score is the
single highest; a k-way tie shares 1/k) with its SE over games, and the paired difference to the
self-play arm and to the imitation start, game by game on the common seeds (the same game
index is the same seed and power for every arm). Round robin: each arm against six copies of
another (all greedy, so 7 games, one a power, exact for these agents). Exploitability: the best
point of each exploiter's curve and its final figure. Training: steps and CPU from the runs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ARMS = ("selfplay", "fixed", "pfsp", "pfsp_exploiter")


def shares(report: dict) -> list[float]:
    """The hero's win share in each game of a ``diplomacy eval --json --per-game`` report."""
    out = []
    for game in report["per_game"]:
        scores = game["scores"]
        top = max(scores.values())
        tied = [p for p, s in scores.items() if s == top]
        out.append(1.0 / len(tied) if game["hero_power"] in tied else 0.0)
    return out


def centres(report: dict) -> list[float]:
    return [float(g["centers"][g["hero_power"]]) for g in report["per_game"]]


def mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    return mean_se([x - y for x, y in zip(a, b, strict=True)])


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() and path.stat().st_size else None


def main(out: Path) -> None:
    ev = out / "eval"
    extra = ("pfsp_long",)  # the PFSP arm run for self-play's CPU time (docs/reference/league.md)
    strength = {a: load(ev / f"strength_{a}.json") for a in ("start", *ARMS, *extra)}
    have = {a: r for a, r in strength.items() if r is not None}
    if have:
        seed = next(iter(have.values()))["seed"]
        n = len(next(iter(have.values()))["per_game"])
        print(f"### Against six dumb_bots (10-year games, {n} games of seed {seed})\n")
        print("| hero | win share ± SE | mean centres | paired vs self-play | paired vs start |")
        print("|---|---|---|---|---|")
        base = have.get("selfplay")
        start = have.get("start")
        for arm, report in have.items():
            s = shares(report)
            m, se = mean_se(s)
            c, _ = mean_se(centres(report))
            cells = []
            for ref in (base, start):
                if ref is None or ref is report:
                    cells.append("—")
                else:
                    d, dse = paired(s, shares(ref))
                    cells.append(
                        f"{d:+.3f} ± {dse:.3f} ({d / dse:+.1f} SE)" if dse else f"{d:+.3f}"
                    )
            print(f"| {arm} | {m:.3f} ± {se:.3f} | {c:.2f} | {cells[0]} | {cells[1]} |")
        print()
    rr = {(a, b): load(ev / f"rr_{a}__{b}.json") for a in ARMS for b in ARMS if a != b}
    if any(v is not None for v in rr.values()):
        print(
            "### Round robin: the row's hero against six copies of the column's (7 greedy games)\n"
        )
        print("| hero \\ six of | " + " | ".join(ARMS) + " | mean |")
        print("|---" * (len(ARMS) + 2) + "|")
        for a in ARMS:
            row, vals = [], []
            for b in ARMS:
                r = rr.get((a, b))
                if a == b or r is None:
                    row.append("—")
                    continue
                m, _ = mean_se(shares(r))
                c, _ = mean_se(centres(r))
                vals.append(m)
                row.append(f"{m:.3f} ({c:.1f} c)")
            mean = f"{sum(vals) / len(vals):.3f}" if vals else "—"
            print(f"| {a} | " + " | ".join(row) + f" | {mean} |")
        print()
    for prefix, title in (
        ("exploit", "an exploiter's win share against six greedy copies (7 games a point)"),
        ("exploit_sampled", "against six sampling copies (70 games a point, final 140)"),
    ):
        exploit_table(out, prefix, title)
    training_table(out)


def exploit_table(out: Path, prefix: str, title: str) -> None:
    rows = []
    for a in ARMS:
        record = load(out / f"{prefix}_{a}" / "exploit.json")
        if record is None:
            continue
        curve = record["evaluations"]
        best = max(curve.values(), key=lambda e: e["win_share"]) if curve else None
        final = record.get("final")
        rows.append((a, curve, best, final))
    if rows:
        print(f"### Exploitability: {title}\n")
        print("| hero | curve (step: share) | best | final (step, games) |")
        print("|---|---|---|---|")
        for a, curve, best, final in rows:
            pts = ", ".join(
                f"{k}: {v['win_share']:.3f}"
                for k, v in sorted(curve.items(), key=lambda kv: int(kv[0]))
            )
            fin = (
                "—"
                if not final
                else (
                    f"{final['win_share']:.3f} ± {final['win_share_se']:.3f} "
                    f"(step {final['step']}, {final['games']} games)"
                )
            )
            print(f"| {a} | {pts} | {best['win_share']:.3f} | {fin} |")
        print()


def training_table(out: Path) -> None:
    print("### Training (one core each)\n")
    print("| arm | hero steps | exploiter steps | records trained on | seconds | league agents |")
    print("|---|---|---|---|---|---|")
    for a in (*ARMS, "pfsp_long"):
        events = out / a / "events.ndjson"
        if not events.is_file():
            continue
        rows = [json.loads(x) for x in events.open() if '"step"' in x]
        hero = [r for r in rows if r["event"] == "diplomacy.train_step"]
        exploiter = [r for r in rows if r["event"] == "league.exploiter_step"]
        league = out / a / "league.json"
        agents = len(json.loads(league.read_text())["agents"]) if league.is_file() else "?"
        seconds = sum(r.get("seconds", 0.0) for r in hero + exploiter)
        records = int(sum(r.get("records", 0) for r in hero + exploiter))
        print(f"| {a} | {len(hero)} | {len(exploiter)} | {records:,} | {seconds:.0f} | {agents} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
