"""Gating: candidate vs best in paired, side-swapped games with a sequential test
(docs/reference/design.md#gating-and-promotion).

Both agents play in evaluation mode (no noise, temperature 0, deterministic ties) on episode
seeds from a persisted seed set, so the same config, checkpoints and seed set give the same
result. Games are played in chunks of pairs; after ``min_games`` the SPRT of
:func:`leaguezero.common.stats.sprt_paired` may stop the gate early:

* SPRT accepts H1 (the candidate is ``sprt_elo1`` stronger): promote;
* SPRT accepts H0 (``sprt_elo0``): reject;
* undecided at ``max_games``: promote iff the candidate's win rate exceeds ``threshold``.

The paired score difference and its standard error are reported either way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from leaguezero.common.atomic import atomic_write_json
from leaguezero.common.stats import PairedSummary, SprtResult, paired_summary, sprt_paired
from leaguezero.yatzy.agents.base import Agent
from leaguezero.yatzy.agents.match import episode_seeds, play_match
from leaguezero.yatzy.config import GateSection

SEED_SET_VERSION = 1
CHUNK_PAIRS = 50


class SeedSetError(ValueError):
    """A persisted seed set that cannot be read (the message names the file)."""


def load_seed_set(folder: str | Path, name: str, pairs: int) -> np.ndarray:
    """The first ``pairs`` episode seeds of the named seed set, created and persisted if new.

    A seed set is a pure function of its name, written once to ``folder/<name>.json`` and read
    back ever after, so every gate of a run (and of other runs sharing the folder) plays the
    same deals. Raises :class:`SeedSetError` for a corrupt or wrong-version file.
    """
    path = Path(folder) / f"{name}.json"
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema_version") != SEED_SET_VERSION or data.get("name") != name:
                raise ValueError(f"not a version-{SEED_SET_VERSION} seed set named {name!r}")
            seeds = np.array(data["seeds"], dtype=np.int64).reshape(-1)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise SeedSetError(
                f"seed set {path} is damaged ({reason}); delete it to re-create it from its name"
            ) from None
        if len(seeds) >= pairs:
            return seeds[:pairs]
    # Derive from the name so that re-creating a lost file gives the same seeds.
    master = int.from_bytes(name.encode("utf-8")[:16].ljust(16, b"\0"), "little") % 2**63
    seeds = episode_seeds(master, max(pairs, 1))
    atomic_write_json(
        path, {"schema_version": SEED_SET_VERSION, "name": name, "seeds": seeds.tolist()}
    )
    return seeds[:pairs]


@dataclass
class GateResult:
    promote: bool
    reason: str  # "sprt_h1" | "sprt_h0" | "threshold" | "check_passed" | "rollback"
    summary: PairedSummary
    sprt: SprtResult | None  # None for continuous promotion's regression check
    seconds: float

    def to_dict(self) -> dict:
        return {
            "promote": self.promote,
            "reason": self.reason,
            **self.summary.to_dict(),
            "sprt": asdict(self.sprt) if self.sprt is not None else None,
            "seconds": self.seconds,
        }


def run_gate(
    candidate: Agent,
    best: Agent,
    cfg: GateSection,
    seeds: np.ndarray,
    progress: Callable[[int], None] | None = None,
) -> GateResult:
    """Play the gate on ``seeds`` (int64 [pairs]) until the SPRT decides or seeds run out.

    ``progress(games)`` is called after each chunk with the games just played.
    """
    t0 = time.perf_counter()
    a_scores = np.zeros((0, 2), np.int64)
    b_scores = np.zeros((0, 2), np.int64)
    sprt = sprt_paired(np.zeros(0), cfg.sprt_elo0, cfg.sprt_elo1, cfg.sprt_alpha, cfg.sprt_beta)
    pos = 0
    while pos < len(seeds):
        chunk = seeds[pos : pos + CHUNK_PAIRS]
        result = play_match(candidate, best, 2 * len(chunk), 0, seeds=chunk)
        a_scores = np.concatenate([a_scores, result.a_scores])
        b_scores = np.concatenate([b_scores, result.b_scores])
        pos += len(chunk)
        if progress is not None:
            progress(2 * len(chunk))
        points = ((a_scores > b_scores) + 0.5 * (a_scores == b_scores)).mean(axis=1)
        sprt = sprt_paired(points, cfg.sprt_elo0, cfg.sprt_elo1, cfg.sprt_alpha, cfg.sprt_beta)
        if 2 * pos >= cfg.min_games and sprt.decision != "continue":
            break
    summary = paired_summary(a_scores, b_scores)
    if sprt.decision == "H1" and 2 * pos >= cfg.min_games:
        promote, reason = True, "sprt_h1"
    elif sprt.decision == "H0" and 2 * pos >= cfg.min_games:
        promote, reason = False, "sprt_h0"
    else:
        promote, reason = summary.a_win_rate > cfg.threshold, "threshold"
    return GateResult(promote, reason, summary, sprt, time.perf_counter() - t0)


def check_seeds(seed_set: str, iteration: int, pairs: int) -> np.ndarray:
    """Fresh episode seeds for the regression check of ``iteration`` (a pure function of the
    seed-set name and the iteration: a resumed check replays the same deals, and no two checks
    share theirs, so no network is selected for a lucky set of deals)."""
    master = int.from_bytes(seed_set.encode("utf-8")[:8].ljust(8, b"\0"), "little")
    return episode_seeds((master * 1_000_003 + iteration) % 2**63, pairs)


def run_check(
    current: Agent,
    anchor: Agent,
    seeds: np.ndarray,
    progress: Callable[[int], None] | None = None,
) -> GateResult:
    """Continuous promotion's regression check: ``current`` against ``anchor`` on ``seeds``.

    ``promote`` is False (roll back to the anchor) when the current network scores
    significantly fewer points per game: paired score difference below -2 standard errors.
    Points, not wins, decide: every game's margin counts, so the test separates smaller
    differences than a win rate over the same games.
    """
    t0 = time.perf_counter()
    a_scores, b_scores = [], []
    for pos in range(0, len(seeds), CHUNK_PAIRS):
        chunk = seeds[pos : pos + CHUNK_PAIRS]
        result = play_match(current, anchor, 2 * len(chunk), 0, seeds=chunk)
        a_scores.append(result.a_scores)
        b_scores.append(result.b_scores)
        if progress is not None:
            progress(2 * len(chunk))
    summary = paired_summary(np.concatenate(a_scores), np.concatenate(b_scores))
    worse = summary.score_diff_mean < -2.0 * summary.score_diff_se
    reason = "rollback" if worse else "check_passed"
    return GateResult(not worse, reason, summary, None, time.perf_counter() - t0)
