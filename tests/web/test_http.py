"""The web app over HTTP: bad requests get a 4xx with one line, games stay in their session,
the store is bounded and expires idle games, the default bind is 127.0.0.1."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

from fastapi.testclient import TestClient

from leaguezero.web.app import PAGES, WebSettings, create_app
from leaguezero.web.diplomacy_upload import NOT_A_SAVED_GAME
from leaguezero.web.sessions import GameNotFound, GameStore, StoreFull


@pytest.fixture()
def app():
    return create_app(WebSettings(max_games=4))


def _client(app) -> TestClient:
    client = TestClient(
        app,
        raise_server_exceptions=False,
        base_url="http://localhost",
        headers={"X-Leaguezero": "1"},  # as the pages send it
    )
    assert client.get("/").status_code == 200  # the first page sets the session cookie
    return client


def _one_line_error(response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error and "\n" not in error and "Traceback" not in error
    return error


def test_pages_are_served(app):
    client = _client(app)
    for page in ["/", *(f"/{name}" for name in PAGES)]:
        response = client.get(page)
        assert response.status_code == 200 and "<html" in response.text, page
    assert client.get("/static/yatzy.js").status_code == 200


def test_bad_yatzy_requests_get_4xx_with_one_line(app):
    client = _client(app)
    assert "unknown agent" in _one_line_error(
        client.post("/api/yatzy/games", json={"agent": "nobody"}), 400
    )
    assert "cannot load 'x.pt'" in _one_line_error(
        client.post("/api/yatzy/games", json={"agent": "model:/nope/x.pt"}), 400
    )
    _one_line_error(client.post("/api/yatzy/games", json={"seat": 5}), 422)
    json_type = {"Content-Type": "application/json"}
    _one_line_error(client.post("/api/yatzy/games", content=b"{not json", headers=json_type), 422)
    _one_line_error(client.get("/api/yatzy/games/nosuchgame"), 404)
    _one_line_error(client.get("/api/nothing-here"), 404)
    game = client.post("/api/yatzy/games", json={"agent": "greedy", "judge": False}).json()
    url = f"/api/yatzy/games/{game['id']}"
    assert "either keep" in _one_line_error(client.post(f"{url}/move", json={}), 400)
    assert "unknown box" in _one_line_error(client.post(f"{url}/move", json={"mark": 99}), 400)
    assert "positions" in _one_line_error(client.post(f"{url}/move", json={"keep": [7]}), 400)
    assert "wastes a reroll" in _one_line_error(
        client.post(f"{url}/move", json={"keep": [0, 1, 2, 3, 4]}), 400
    )
    assert "your turn" in _one_line_error(client.post(f"{url}/agent-step"), 400)
    assert "no oracle" in _one_line_error(client.get(f"{url}/hint"), 400)
    marked = client.post(f"{url}/move", json={"mark": "chance"}).json()
    assert marked["to_move"] == "agent" and marked["cards"][-2]["name"] == "chance"
    assert "not your turn" in _one_line_error(client.post(f"{url}/move", json={"mark": 0}), 400)
    stepped = client.post(f"{url}/agent-step").json()
    assert stepped["did"].startswith("rolled ")


def test_pretrained_is_shown_by_its_name_and_totals_are_the_boxes_sum(app):
    client = _client(app)
    game = client.post("/api/yatzy/games", json={"agent": "pretrained", "judge": False}).json()
    assert game["agent"] == "pretrained"  # not the shipped file's absolute path
    assert game["totals"]["you"] == {"upper": 0, "bonus": None, "score": 0}


def test_a_game_is_not_visible_from_another_session(app):
    alice, bob = _client(app), _client(app)
    assert alice.cookies["lz_session"] != bob.cookies["lz_session"]
    game = alice.post("/api/yatzy/games", json={"agent": "greedy", "judge": False}).json()
    assert alice.get(f"/api/yatzy/games/{game['id']}").status_code == 200
    _one_line_error(bob.get(f"/api/yatzy/games/{game['id']}"), 404)
    _one_line_error(bob.post(f"/api/yatzy/games/{game['id']}/move", json={"mark": 0}), 404)
    # Bob's own game with the same seed is a separate state: his move leaves Alice's alone.
    other = bob.post("/api/yatzy/games", json={"agent": "greedy", "judge": False}).json()
    bob.post(f"/api/yatzy/games/{other['id']}/move", json={"mark": "chance"})
    mine = alice.get(f"/api/yatzy/games/{game['id']}").json()
    assert mine["to_move"] == "you" and all(row["you"] is None for row in mine["cards"])


def test_the_store_is_bounded_and_expires_idle_games():
    now = [0.0]
    store = GameStore(max_games=2, ttl_s=10.0, clock=lambda: now[0])
    a = store.add("s", "game a")
    b = store.add("s", "game b")
    assert store.get("s", a) == "game a"  # a is now the most recently used
    c = store.add("s", "game c")  # evicts b, the least recently used
    assert len(store) == 2 and store.get("s", c) == "game c"
    with pytest.raises(GameNotFound):
        store.get("s", b)
    with pytest.raises(GameNotFound):
        store.get("other session", a)
    now[0] = 11.0
    with pytest.raises(GameNotFound):
        store.get("s", a)  # idle past its ttl
    assert len(store) == 0


def test_a_full_store_never_pushes_out_a_game_in_play():
    now = [0.0]
    store = GameStore(max_games=3, per_session=2, evict_idle_s=60.0, clock=lambda: now[0])
    mine = store.add("victim", "my game")
    first = store.add("other 1", "x")
    store.add("other 2", "y")
    with pytest.raises(StoreFull):  # every game was played within the minute
        store.add("other 3", "z")
    now[0] = 30.0
    assert store.get("victim", mine) == "my game"
    store.add("other 2", "y2")  # a session full of the store replaces its own game
    now[0] = 70.0  # other 1's game has been idle for 70 s, the victim's for 40 s
    store.add("other 3", "z")
    assert store.get("victim", mine) == "my game"
    with pytest.raises(GameNotFound):
        store.get("other 1", first)


def test_the_command_binds_localhost_by_default():
    from leaguezero.web.cli import web

    defaults = web.__defaults__ or ()
    assert "127.0.0.1" in defaults and 8080 in defaults


def test_runs_are_reached_by_index_only(tmp_path):
    from tests.web.fake_runs import make_league_run

    run = make_league_run(tmp_path / "league_run", steps=2)
    client = _client(create_app(WebSettings(runs=[run])))
    listed = client.get("/api/runs").json()["runs"]
    assert listed == [{"index": 0, "name": "league_run", "kinds": ["league"]}]
    view = client.get("/api/runs/0").json()["league"]
    assert [a["name"] for a in view["agents"]][:1] == ["ckpt_000020"]
    # Ratings relative to base_model (= 0) beside the absolute ones.
    assert view["relative_to"] == "base_model"
    elo = {a["name"]: (a["elo"], a["elo_relative"]) for a in view["agents"]}
    assert elo["base_model"][1] == 0.0
    assert elo["random_bot"][1] == elo["random_bot"][0] - elo["base_model"][0]
    assert view["pfsp"]["draws"] == 6 and view["pfsp"]["steps"] == [10, 20]
    chart = client.get("/runs/0/elo.png")
    assert chart.status_code == 200 and chart.content[:4] == b"\x89PNG"
    # The payoff table of the whole match log, with Nash-averaged ratings.
    from leaguezero.league.matchlog import read_matches
    from leaguezero.league.payoff import payoff_table

    payoff = view["payoff"]
    table = payoff_table(read_matches(run / "league_matches.ndjson"))
    assert payoff["agents"] == table.agents and set(payoff["nash"]) == set(table.agents)
    for i in range(len(table.agents)):
        for j in range(len(table.agents)):
            cell = payoff["cells"][i][j]
            assert (cell is None) == (table.games[i, j] == 0)
            if cell is not None:
                assert cell == [table.mean[i, j], table.games[i, j]]
    assert "no run 1" in _one_line_error(client.get("/api/runs/1"), 404)
    _one_line_error(client.get("/api/runs/-1"), 404)
    _one_line_error(client.get("/api/runs/..%2F..%2Fetc"), 404)
    _one_line_error(client.get("/api/runs/abc"), 422)
    assert "no Yatzy stats" in _one_line_error(client.get("/runs/0/report"), 404)
    (run / "league.json").write_text("{broken")
    _one_line_error(client.get("/api/runs/0"), 400)


POWERS_ORDER = ("AUSTRIA", "ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA", "TURKEY")
BOTS6 = {p: "random_bot" for p in ("AUSTRIA", "ENGLAND", "GERMANY", "ITALY", "RUSSIA", "TURKEY")}


def test_bad_diplomacy_requests_get_4xx_with_one_line(app):
    client = _client(app)
    start = "/api/diplomacy/games"
    assert "unknown agent" in _one_line_error(
        client.post(start, json={"agents": {**BOTS6, "FRANCE": "no_such_bot"}}), 400
    )
    assert "no agent for FRANCE" in _one_line_error(client.post(start, json={"agents": BOTS6}), 400)
    assert "not one of" in _one_line_error(
        client.post(start, json={"agents": BOTS6, "human": "ATLANTIS"}), 400
    )
    _one_line_error(client.post(start, json={"agents": BOTS6, "max_years": 99}), 422)
    game = client.post(start, json={"agents": BOTS6, "human": "FRANCE", "max_years": 1}).json()
    url = f"/api/diplomacy/games/{game['id']}"
    assert "not legal for FRANCE" in _one_line_error(
        client.post(f"{url}/step", json={"orders": ["A PAR - MOS"]}), 400
    )
    assert "not legal" in _one_line_error(  # two orders for one unit
        client.post(f"{url}/step", json={"orders": ["A PAR H", "A PAR - BUR"]}), 400
    )
    assert client.get(url).json()["phase"] == "S1901M"  # a refused step changed nothing
    assert "out of range" in _one_line_error(client.get(f"{url}?phase=5"), 400)
    stepped = client.post(f"{url}/step", json={"orders": ["A PAR - BUR"]}).json()
    assert stepped["phase"] == "F1901M"
    notes = stepped["last_turn"]["notes"]  # what was said in the turn just played, only
    assert notes == ["Spring 1901, movement: 2 of your units without orders hold"], notes
    assert client.post(f"{url}/step", json={}).json()["last_turn"]["notes"] != notes
    yatzy = client.post("/api/yatzy/games", json={"agent": "greedy", "judge": False}).json()
    assert "not a Diplomacy game" in _one_line_error(
        client.get(f"/api/diplomacy/games/{yatzy['id']}"), 400
    )
    replays = "/api/diplomacy/replays"
    json_type = {"Content-Type": "application/json"}
    not_json = client.post(replays, content=b"{nope", headers=json_type)
    assert "not JSON" in _one_line_error(not_json, 400)
    assert "not a saved game" in _one_line_error(client.post(replays, json=[1, 2]), 400)
    for not_saved in ({"id": "x"}, {"phases": [], "leaguezero": 3}):  # one clear line
        assert _one_line_error(client.post(replays, json=not_saved), 400) == NOT_A_SAVED_GAME
    old_version = {"leaguezero": {"schema_version": 0}}
    error = _one_line_error(client.post(replays, json=old_version), 400)
    assert error.startswith("the uploaded game has leaguezero schema_version 0"), error


def test_a_diplomacy_game_is_not_visible_from_another_session(app):
    alice, bob = _client(app), _client(app)
    game = alice.post("/api/diplomacy/games", json={"agents": {**BOTS6, "FRANCE": "greedy_bot"}})
    url = f"/api/diplomacy/games/{game.json()['id']}"
    _one_line_error(bob.get(url), 404)
    _one_line_error(bob.post(f"{url}/step", json={}), 404)
    assert alice.get(url).json()["phase"] == "S1901M"
    assert alice.post(f"{url}/step", json={}).json()["phase"] == "F1901M"


def test_the_shipped_policy_plays_a_power_and_a_checkpoint_path_is_refused(app, tmp_path):
    from leaguezero.diplomacy.agents.policy import DiplomacyPolicy, PolicyConfig
    from leaguezero.diplomacy.game.catalogue import pretrained_policy_path

    client = _client(app)
    start = "/api/diplomacy/games"
    if pretrained_policy_path() is not None:
        game = client.post(start, json={"agents": {**BOTS6, "FRANCE": "pretrained"}}).json()
        assert [p["agent"] for p in game["powers"] if p["power"] == "FRANCE"] == ["pretrained"]
        stepped = client.post(f"/api/diplomacy/games/{game['id']}/step", json={}).json()
        france = stepped["powers"][POWERS_ORDER.index("FRANCE")]
        assert stepped["phase"] == "F1901M" and len(france["units"]) == 3
        spring = client.get(f"/api/diplomacy/games/{game['id']}?phase=0").json()
        assert len(spring["powers"][POWERS_ORDER.index("FRANCE")]["orders"]) == 3  # the policy's
    # a real checkpoint, a damaged one: by path, neither is opened; one answer for both
    path = DiplomacyPolicy(PolicyConfig(hidden=16, layers=1), seed=6).save(tmp_path / "c.pt")
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")
    errors = [
        _one_line_error(client.post(start, json={"agents": {**BOTS6, "FRANCE": str(p)}}), 400)
        for p in (path, damaged)
    ]
    assert "never a path" in errors[0] and str(tmp_path) not in errors[0]
    assert errors[0].replace("c.pt", "X") == errors[1].replace("damaged.pt", "X")
    assert "pretrained" in client.get("/api/diplomacy/agents").json()["agents"]
