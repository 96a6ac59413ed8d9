"""search.target_depth2_share: two-turn-deep backups as targets on a sample of turn starts."""

from __future__ import annotations

import numpy as np

from leaguezero.yatzy.config import YatzyConfig
from leaguezero.yatzy.game.rules import DICE_RNG, STATE_LEN, new_matches
from leaguezero.yatzy.search.settings import SearchSettings
from leaguezero.yatzy.search.turn import TurnSearch
from leaguezero.yatzy.train.selfplay.turn import TurnHero
from tests.yatzy.search.test_turn_search import CountingEvaluator


def _recorded_q(share: float, games: int = 6) -> tuple[np.ndarray, TurnHero]:
    cfg = YatzyConfig.model_validate({"search": {"target_depth2_share": share}})
    hero = TurnHero(cfg, SearchSettings.from_config(cfg), CountingEvaluator(), games, seed=0)
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + 11, DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    for slot in range(games):
        hero.start(slot)
    hero.act(states, rows, np.ones(games, np.bool_), np.random.default_rng(3))
    return hero.records.qs[:, 0].copy(), hero


def test_every_turn_start_gets_the_two_turn_backup_at_share_one() -> None:
    games = 6
    states = np.zeros((games, STATE_LEN), np.int64)
    new_matches(states, np.arange(games, dtype=np.int64) + 11, DICE_RNG)
    rows = np.arange(games, dtype=np.int64)
    _, _, shallow = TurnSearch(CountingEvaluator(), depth=1).decide(states, rows)
    _, _, deep = TurnSearch(CountingEvaluator(), depth=2).decide(states, rows)
    assert not np.allclose(shallow, deep)  # the test can tell the two apart

    q0, hero0 = _recorded_q(0.0)
    np.testing.assert_allclose(q0, shallow.astype(np.float32))
    assert hero0.deep is None
    q1, hero1 = _recorded_q(1.0)
    np.testing.assert_allclose(q1, deep.astype(np.float32))
    assert hero1.deep_targets == games
    # The two-turn searches' evaluations are counted in the self-play figures.
    fields = hero1.stats_fields(1, 1, 1.0, [], 0.0)
    assert fields["sims"] > hero0.stats_fields(1, 1, 1.0, [], 0.0)["sims"]


def test_a_share_between_samples_some_turn_starts() -> None:
    _, hero = _recorded_q(0.5, games=64)
    assert 0 < hero.deep_targets < 64
