"""The web app's game store, sessions and saved-game uploads against one hostile local client:
raw HTTP on sockets to a real uvicorn server, as issue 54 probed it (items 3, 4 and 9).

Every wait has a deadline and polls a condition; hostile loops are bounded in count. A second
client is told apart by its address: the probes connect from 127.0.0.2 (any 127/8 address
reaches a server on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from tests.web.conftest import DEADLINE_S, LiveServer, http, issued_session, new_session

pytest.importorskip("uvicorn", reason="the web extra is not installed")

from leaguezero.web.app import WebSettings
from leaguezero.web.sessions import GameNotFound, GameStore, StoreFull

ANSWER_S = 60.0  # bounds how long a hung server is waited on; answers come at once
YATZY = "/api/yatzy/games"
REPLAYS = "/api/diplomacy/replays"
BOTS6 = {p: "random_bot" for p in ("AUSTRIA", "ENGLAND", "GERMANY", "ITALY", "RUSSIA", "TURKEY")}


def one_line(status: int, text: str, expected: tuple[int, ...]) -> str:
    assert status in expected, (status, text[:300])
    error = json.loads(text)["error"]
    assert error and "\n" not in error and "Traceback" not in error, error
    return error


# --------------------------------------------------- item 3: sessions are the server's to issue
def test_a_self_chosen_session_id_is_replaced_by_a_server_issued_one():
    with LiveServer(WebSettings(max_games=8)) as server:
        chosen = "victim-session-0123456789"
        status, headers, text = http(server.port, "POST", YATZY, b'{"judge": false}', chosen)
        assert status == 200, text
        issued = issued_session(headers)
        assert issued and issued != chosen  # the client's choice is not taken
        game = json.loads(text)["id"]
        assert http(server.port, "GET", f"{YATZY}/{game}", cookie=issued)[0] == 200
        status, headers, _ = http(server.port, "GET", f"{YATZY}/{game}", cookie=chosen)
        assert status == 404 and issued_session(headers) not in (None, chosen, issued)
        forged = issued[:-4] + ("AAAA" if not issued.endswith("AAAA") else "BBBB")
        status, headers, _ = http(server.port, "GET", f"{YATZY}/{game}", cookie=forged)
        assert status == 404 and issued_session(headers) not in (None, forged, issued)
        # an issued id is kept: no new cookie while it is valid
        assert issued_session(http(server.port, "GET", "/yatzy", cookie=issued)[1]) is None


def flood_from_one_user(port: int) -> list[int]:
    """Seven sessions of one local user, each from its own loopback address, ask for six games
    each: the answers."""
    answers = []
    for i in range(7):
        source = "127.0.0.1" if i == 0 else f"127.0.1.{i}"  # hopping addresses buys nothing
        session = new_session(port, source=source)
        for _ in range(6):
            answers.append(http(port, "POST", YATZY, b'{"judge": false}', session, source)[0])
    return answers


def test_one_client_cannot_fill_the_store_for_everyone(monkeypatch):
    """Seven sessions of one client ask for 42 games of a 32-game store; a browser of another
    client still gets its game, and the flooding client is the one refused. The other client
    connects from 127.0.0.2, taken for another local user here
    (:func:`test_another_local_user_gets_a_game_beside_a_flood` has a real one)."""
    import leaguezero.web.sessions as sessions

    real = getattr(sessions, "peer_uid", None)

    def other_user(client, server):
        return 4242 if client[0] == "127.0.0.2" else real(client, server)

    monkeypatch.setattr(sessions, "peer_uid", other_user, raising=False)
    with LiveServer(WebSettings(max_games=32)) as server:
        answers = flood_from_one_user(server.port)
        status, headers, text = http(
            server.port, "POST", YATZY, b'{"judge": false}', source="127.0.0.2"
        )
        print(f"flooding client: {answers.count(200)} of {len(answers)} answered 200; "
              f"another client: {status}")  # fmt: skip
        assert status == 200, text
        assert len(server.app.state.games) <= 16 + 1 and set(answers) <= {200, 503}
        game, session = json.loads(text)["id"], issued_session(headers)
        assert http(server.port, "GET", f"{YATZY}/{game}", cookie=session, source="127.0.0.2")[
            0
        ] == 200  # fmt: skip


def test_a_loopback_client_is_known_by_its_user():
    from leaguezero.web.sessions import peer_uid

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        for source in ("127.0.0.1", "127.0.0.9"):
            with socket.create_connection(
                listener.getsockname(), timeout=DEADLINE_S, source_address=(source, 0)
            ) as sock:
                accepted, _ = listener.accept()
                accepted.close()
                assert peer_uid(sock.getsockname(), listener.getsockname()) == os.getuid()
    assert peer_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None  # no such connection


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as a second local user")
def test_another_local_user_gets_a_game_beside_a_flood():
    with LiveServer(WebSettings(max_games=32)) as server:
        answers = flood_from_one_user(server.port)
        assert answers.count(503) > 0
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # another local user (nobody), same address as the flood
            status = 0
            try:
                os.setgid(65534)
                os.setuid(65534)
                status = http(server.port, "POST", YATZY, b'{"judge": false}')[0]
            finally:
                os.write(write_end, str(status).encode())
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as answer:
            status = int(answer.read() or 0)
        os.waitpid(child, 0)
        print(f"root's flood: {answers.count(200)} of 42 answered 200; nobody's game: {status}")
        assert status == 200


def test_a_full_store_evicts_an_idle_game_of_anyone_before_the_sessions_own_in_play():
    now = [0.0]
    store = GameStore(max_games=3, per_session=3, evict_idle_s=60.0, clock=lambda: now[0])
    idle = store.add("other", "an idle game")
    now[0] = 100.0  # the other session's game has been idle for 100 s
    diplomacy = store.add("me", "my Diplomacy game")
    store.add("someone", "a game in play")
    yatzy = store.add("me", "my Yatzy game")  # the store is full: the idle game goes
    assert store.get("me", diplomacy) == "my Diplomacy game"
    assert store.get("me", yatzy) == "my Yatzy game"
    with pytest.raises(GameNotFound):
        store.get("other", idle)
    with pytest.raises(StoreFull):  # nothing idle and another session's games are in play
        store.add("third", "x")


def test_fresh_games_are_not_evicted_before_their_first_move():
    """16 sessions start two games each (a Diplomacy game, then a Yatzy one) in a 32-game store
    where 32 games idle: every new game takes an idle one's place, none a fresh one's."""
    now = [0.0]
    store = GameStore(max_games=32, per_session=6, evict_idle_s=60.0, clock=lambda: now[0])
    for i in range(32):
        store.add(f"idle {i // 6}", f"old {i}")
    now[0] = 100.0
    fresh = [(f"s{i}", store.add(f"s{i}", f"new {i} {kind}")) for i in range(16) for kind in "dy"]
    gone = 0
    for session, game in fresh:
        try:
            store.get(session, game)
        except GameNotFound:
            gone += 1
    print(f"{gone} of {len(fresh)} fresh games gone before their first move")
    assert gone == 0


# ------------------------------------------------------- item 4: uploads bounded before parsing
@pytest.fixture(scope="module")
def saved_game() -> dict:
    """A real saved game (the start of a game), as ``leaguezero diplomacy play`` writes one."""
    from leaguezero.diplomacy.game.env import DiplomacyEnv

    return DiplomacyEnv(max_years=1).to_saved_game()


def test_an_upload_with_700000_rules_is_refused_and_good_games_are_served_meanwhile(saved_game):
    rules = [str(i) for i in range(700_000)]
    hostile = json.dumps({**saved_game, "rules": rules}, separators=(",", ":")).encode()
    assert len(hostile) < 8 * 2**20
    with LiveServer(WebSettings(max_games=32)) as server:
        answers: list[tuple[int, str]] = []

        def upload() -> None:
            try:
                status, _, text = http(server.port, "POST", REPLAYS, hostile)
            except OSError as err:  # reset: no answer
                status, text = 0, str(err)
            answers.append((status, text))

        uploads = [threading.Thread(target=upload) for _ in range(4)]
        for thread in uploads:
            thread.start()
        deadline = time.monotonic() + DEADLINE_S  # until an upload is parsed, or all answered
        while server.app.state.pool.running == 0 and len(answers) < 4:
            assert time.monotonic() < deadline, "the uploads were neither parsed nor answered"
            time.sleep(0.01)
        good = []
        session = new_session(server.port, source="127.0.0.2")
        for _ in range(12):  # a good game creation beside the uploads, one after another
            body = json.dumps({"agents": {**BOTS6, "FRANCE": "random_bot"}}).encode()
            status, _, _ = http(
                server.port, "POST", "/api/diplomacy/games", body, session, "127.0.0.2"
            )
            good.append(status)
        for thread in uploads:
            thread.join(DEADLINE_S)
        print(f"good creations: {good.count(200)} of 12 answered 200; uploads: "
              f"{[status for status, _ in answers]}")  # fmt: skip
        assert good.count(200) == 12, good
        refusals = [one_line(status, text, (400, 413, 503)) for status, text in answers]
        assert len(refusals) == 4 and any('"rules"' in why for why in refusals), refusals


@pytest.mark.parametrize(
    "bomb",
    [b"[" * 100_000, b'{"a":' * 50_000, b"[" * 2_000 + b"]" * 2_000],
    ids=["100000 [", "50000 objects", "2000 [ ]"],
)
def test_deeply_nested_json_is_one_line(bomb):
    with LiveServer(WebSettings()) as server:
        status, _, text = http(server.port, "POST", REPLAYS, bomb)
        assert "nested" in one_line(status, text, (400, 413))
        status, _, text = http(server.port, "POST", YATZY, bomb[:60_000])
        one_line(status, text, (400, 413, 422))


def test_every_list_of_a_saved_game_is_bounded(saved_game):
    phase = saved_game["phases"][0]
    units = {**phase["state"]["units"], "FRANCE": ["A PAR"] * 200_000}
    huge = {**phase, "state": {**phase["state"], "units": units}}
    with LiveServer(WebSettings()) as server:
        for hostile in (
            {**saved_game, "phases": [huge]},
            {**saved_game, "phases": [phase], "messages": [{"x": 1}] * 300_000},
            {**saved_game, "rules": ["x" * 200_000]},
        ):
            status, _, text = http(server.port, "POST", REPLAYS, json.dumps(hostile).encode())
            one_line(status, text, (400, 413))
        good = json.dumps(saved_game).encode()
        status, _, text = http(server.port, "POST", REPLAYS, good)
        assert status == 200 and json.loads(text)["phase"] == "S1901M", text[:300]


def test_a_diplomacy_agent_that_is_a_path_is_refused_before_anything_is_loaded(
    tmp_path, monkeypatch
):
    import leaguezero.diplomacy.agents.resolvers as resolvers
    import leaguezero.diplomacy.game.catalogue as catalogue

    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')  # a base model, to the CLI
    loaded: list[str] = []
    real_parse = catalogue.parse_agents

    def parse(names):
        loaded.extend(n for n in names if "/" in n)
        return real_parse(names)

    monkeypatch.setattr(catalogue, "parse_agents", parse)
    monkeypatch.setattr(resolvers, "command_resolver", lambda *a, **k: loaded.append("load"))
    with LiveServer(WebSettings()) as server:
        for name in (str(folder), str(tmp_path), "../../etc", "/dev/zero"):
            body = json.dumps({"agents": {**BOTS6, "FRANCE": name}}).encode()
            status, _, text = http(server.port, "POST", "/api/diplomacy/games", body)
            error = one_line(status, text, (400,))
            assert str(tmp_path) not in error, error
    assert loaded == [], "a path reached the agent catalogue or a loader"


# ----------------------------------------- item 9: a burst beyond the connection cap is shed
def burst(port: int, count: int, stagger: bool = False) -> dict[str, int]:
    """``count`` connections, each sending one GET once all are open (``stagger``: opened one
    after another, so none waits on a full listen queue) or as each opens: how each ended."""
    import asyncio

    request = f"GET /api/yatzy/agents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    request += "Connection: close\r\n\r\n"

    async def ask(opened, outcomes: dict[str, int]) -> None:
        try:
            reader, writer = await opened
            writer.write(request.encode())
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), ANSWER_S)
            writer.close()
        except (ConnectionError, OSError):
            data = b""
        kind = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "reset"
        outcomes[kind] = outcomes.get(kind, 0) + 1

    async def main() -> dict[str, int]:
        outcomes: dict[str, int] = {}

        def opening():
            return asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), ANSWER_S)

        if stagger:
            opened = []
            for _ in range(count):
                connection = await opening()
                # Lets the server's thread take the GIL and accept, so its small listen queue
                # does not fill (a full one only delays a connect by TCP's 1 s retry).
                time.sleep(0.002)
                done = asyncio.get_running_loop().create_future()
                done.set_result(connection)
                opened.append(done)
        else:
            opened = [opening() for _ in range(count)]
        await asyncio.gather(*(ask(o, outcomes) for o in opened))
        return outcomes

    return asyncio.run(main())


def test_a_burst_past_the_connection_cap_gets_answers_not_resets():
    """100 connections open at once against a cap of 16, then a request on each
    (``benchmarks/web_store_uploads.py`` sends 1,000 to ``leaguezero web``'s 256): the ones shed
    get a 503 they can read."""
    with LiveServer(WebSettings(), max_connections=16) as server:
        outcomes = burst(server.port, 100, stagger=True)
        print(f"100 requests at once, 16 connections: {outcomes}")
        assert outcomes.get("reset", 0) == 0, outcomes
        assert outcomes.get("200", 0) > 0 and set(outcomes) <= {"200", "503"}, outcomes
        assert http(server.port, "GET", "/api/yatzy/agents")[0] == 200


def test_a_child_is_stopped_at_its_cpu_limit_and_answers_otherwise():
    import multiprocessing
    import re

    from leaguezero.web.workers import TookTooLong, run_in_child

    assert run_in_child(len, "abc", cpu_s=5, wall_s=DEADLINE_S) == 3
    with pytest.raises(ValueError, match="invalid literal"):
        run_in_child(int, "x", cpu_s=5, wall_s=DEADLINE_S)
    # catastrophic backtracking: 2**40 steps of C code, no memory, no end in sight
    with pytest.raises(TookTooLong, match="CPU time"):
        run_in_child(re.match, "(a+)+$", "a" * 40 + "!", cpu_s=1, wall_s=DEADLINE_S)
    assert multiprocessing.active_children() == []  # the child is gone, not left spinning


def test_a_request_the_app_works_on_past_the_request_timeout_is_answered(monkeypatch):
    """The request timeout bounds how long a request takes to arrive, not how long the app
    works on it: a "Connection: close" request (urllib's, HTTP/1.0's) was cut at 15 s."""
    import leaguezero.web.routes_diplomacy as routes

    timeout_s = 1.0

    def slow_new_game(*args, **kwargs):
        start = time.monotonic()
        while time.monotonic() < start + 2 * timeout_s:  # works past the request timeout
            time.sleep(0.05)
        raise ValueError("worked past the request timeout")

    monkeypatch.setattr(routes, "new_game", slow_new_game)
    with LiveServer(WebSettings(), request_timeout_s=timeout_s) as server:
        body = json.dumps({"agents": {**BOTS6, "FRANCE": "random_bot"}}).encode()
        status, _, text = http(server.port, "POST", "/api/diplomacy/games", body)
        assert "worked past" in one_line(status, text, (400,))


def test_a_game_with_no_room_is_refused_before_it_is_built(monkeypatch):
    import leaguezero.web.routes_yatzy as routes

    built: list[str] = []
    real_new_game = routes.new_game

    def counted(*args, **kwargs):
        built.append("game")
        return real_new_game(*args, **kwargs)

    monkeypatch.setattr(routes, "new_game", counted)
    with LiveServer(WebSettings(max_games=2)) as server:  # one client: 1 game, its half
        first, second = new_session(server.port), new_session(server.port)
        assert http(server.port, "POST", YATZY, b'{"judge": false}', first)[0] == 200
        status, _, text = http(server.port, "POST", YATZY, b'{"judge": false}', second)
        assert "try again later" in one_line(status, text, (503,))
    assert built == ["game"]  # the refused one was never built
