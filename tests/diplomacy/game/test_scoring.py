"""Scores on constructed end states of the real engine (sum-of-squares, and the training score
of docs/reference/design.md#training-score)."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from diplomacy import Game

from leaguezero.diplomacy.game.scoring import (
    calculate_final_scores,
    sum_of_squares_scores,
    win_shares,
)


def board(centers: dict[str, list[str]], units: dict[str, list[str]] | None = None) -> Game:
    """A real game whose listed powers own exactly these centres (and units, if given)."""
    game = Game()
    for power, owned in centers.items():
        game.set_centers(power, owned, reset=True)
    for power, placed in (units or {}).items():
        game.set_units(power, placed, reset=True)
    return game


TEN = ["BEL", "HOL", "SPA", "POR", "MUN", "KIE", "BER", "BRE", "PAR", "MAR"]


def test_single_leader_at_threshold_gets_the_bonus() -> None:
    game = board({"FRANCE": TEN, "GERMANY": []}, {"FRANCE": ["A BEL", "A HOL"]})
    scores = calculate_final_scores(game, win_bonus=5.0, winner_threshold_sc=10)
    assert scores["FRANCE"] == 10 + 0.5 * 2 + 5.0
    # Germany lost its centres but kept its three starting units: 0 + 1.5, no bonus.
    assert scores["GERMANY"] == 1.5
    assert scores["ENGLAND"] == 3 + 0.5 * 3


def test_single_leader_below_threshold_gets_no_bonus() -> None:
    game = board({"FRANCE": TEN[:9]})
    scores = calculate_final_scores(game, win_bonus=5.0, winner_threshold_sc=10)
    assert scores["FRANCE"] == 9 + 0.5 * 3
    assert calculate_final_scores(game, winner_threshold_sc=9)["FRANCE"] == 9 + 1.5 + 5.0


def test_tied_leaders_get_no_bonus_even_above_threshold() -> None:
    russia = ["MOS", "SEV", "STP", "WAR", "RUM", "BUL", "GRE", "SER", "SWE", "NWY"]
    game = board({"FRANCE": TEN, "RUSSIA": russia})
    scores = calculate_final_scores(game, win_bonus=5.0, winner_threshold_sc=10)
    assert scores["FRANCE"] == 10 + 1.5
    assert scores["RUSSIA"] == 10 + 2.0
    assert win_shares({"FRANCE": 11.5, "RUSSIA": 11.5, "ITALY": 3.0}) == {
        "FRANCE": 0.5,
        "RUSSIA": 0.5,
        "ITALY": 0.0,
    }


def test_win_bonus_is_configurable() -> None:
    game = board({"FRANCE": TEN})
    assert calculate_final_scores(game, win_bonus=0.0)["FRANCE"] == 11.5
    assert calculate_final_scores(game, win_bonus=2.5)["FRANCE"] == 14.0


def test_sum_of_squares_without_solo() -> None:
    game = Game()  # 3 centres each, Russia 4
    sos = sum_of_squares_scores(game)
    total = 6 * 9 + 16
    assert sos["RUSSIA"] == pytest.approx(16 / total)
    assert sos["FRANCE"] == pytest.approx(9 / total)
    assert sum(sos.values()) == pytest.approx(1.0)


def test_sum_of_squares_solo_scores_one() -> None:
    extra = ["ROM", "NAP", "VEN", "TUN", "BUD", "VIE", "TRI", "SER"]
    game = board({"FRANCE": TEN + extra})  # 18 centres
    sos = sum_of_squares_scores(game)
    assert sos["FRANCE"] == 1.0
    assert all(value == 0.0 for power, value in sos.items() if power != "FRANCE")
    below = board({"FRANCE": TEN + extra[:7]})  # 17: no solo
    assert 0 < sum_of_squares_scores(below)["FRANCE"] < 1
