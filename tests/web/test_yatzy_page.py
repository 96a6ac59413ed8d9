"""The Yatzy page's API (issue 55): boxes named in words, the opponent's name on the game, and
the best network of each ``--run`` folder offered by index (``run:N``, never a path)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

from fastapi.testclient import TestClient

from leaguezero.web.app import WebSettings, create_app
from tests.web.fake_runs import make_league_run, make_yatzy_run


def _client(runs) -> TestClient:
    client = TestClient(
        create_app(WebSettings(runs=runs)),
        raise_server_exceptions=False,
        base_url="http://localhost",
        headers={"X-Leaguezero": "1"},  # as the pages send it
    )
    assert client.get("/").status_code == 200  # the session cookie
    return client


def test_a_runs_best_is_offered_and_played_by_index(tmp_path):
    runs = [
        make_league_run(tmp_path / "league"),  # no Yatzy network: not offered
        make_yatzy_run(tmp_path / "no_model_yet"),  # a yz run before its first best: not offered
        make_yatzy_run(tmp_path / "my_run", with_best=True),
    ]
    client = _client(runs)
    listed = client.get("/api/yatzy/agents").json()
    assert listed["runs"] == [{"spec": "run:2", "name": "best of my_run"}]
    assert str(tmp_path) not in str(listed)  # an answer names folders, never paths
    game = client.post("/api/yatzy/games", json={"agent": "run:2", "judge": False}).json()
    assert game["agent"] == "best of my_run", game  # the card's column says which agent
    assert str(tmp_path) not in str(game)
    # the game is real: the run's network moves once the person has marked a box
    gid = game["id"]
    after = client.post(f"/api/yatzy/games/{gid}/move", json={"mark": "chance"}).json()
    assert after["to_move"] == "agent"
    assert client.post(f"/api/yatzy/games/{gid}/agent-step").json()["log"][-1]["who"] == "agent"
    for bad, why in (("run:1", "no_model_yet has no models/best.pt"), ("run:3", "no run '3'"),
                     ("run:x", "no run 'x'")):  # fmt: skip
        response = client.post("/api/yatzy/games", json={"agent": bad, "judge": False})
        assert response.status_code == 400 and why in response.json()["error"], response.text


def test_boxes_are_named_in_words():
    client = _client([])
    assert client.get("/api/yatzy/agents").json()["runs"] == []
    game = client.post("/api/yatzy/games", json={"agent": "greedy", "judge": False}).json()
    assert game["agent"] == "greedy"
    labels = {row["name"]: row["label"] for row in game["cards"]}
    assert labels["two_pairs"] == "Two pairs" and labels["three_kind"] == "Three of a kind"
    assert labels["house"] == "Full house" and labels["pair"] == "One pair"
    assert all("_" not in label for label in labels.values())


def test_the_log_names_boxes_in_words():
    from leaguezero.web.yatzy_games import in_words

    assert in_words("rolled 2 2 5 5 6, scored 20 in two_pairs") == (
        "rolled 2 2 5 5 6, scored 20 in two pairs"
    )
    assert in_words("mark three_kind; mark small_straight") == (
        "mark three of a kind; mark small straight"
    )
    assert in_words("scored 12 in pair") == "scored 12 in pair"  # a word already
