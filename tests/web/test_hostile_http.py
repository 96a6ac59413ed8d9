"""The web app against a hostile web page and a hostile local user: raw HTTP on a socket to a real
uvicorn server, as issue 40 probed it (items 1 to 5).

Every wait has a deadline and polls a condition; hostile loops are bounded in count.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.web.conftest import DEADLINE_S, LiveServer, free_port, http, new_session

pytest.importorskip("uvicorn", reason="the web extra is not installed")

from leaguezero.web.app import WebSettings

ANSWER_S = 30.0  # a refusal comes at once; this only bounds how long a hung server is waited on
REPLAYS = "/api/diplomacy/replays"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def raw(port: int, head: str, body: bytes = b"", timeout: float = ANSWER_S) -> tuple[int, str]:
    """Send ``head`` (request line and headers, no blank line) and ``body``; (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode() + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _expected_length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode(errors="replace")


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (it does after a refusal)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass  # closed with our unread bytes in its buffer: what came before is kept
    return data


def _expected_length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":")[1])
    return 1 << 30  # no length: read until the server closes


def post(port: int, path: str, body: bytes, *, kind: str = "application/json", extra: str = ""):
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}{extra}"
    return raw(port, head, body)


def get(port: int, path: str, host: str | None = None) -> tuple[int, str]:
    return raw(port, f"GET {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}")


def one_line(status: int, text: str, expected: int) -> str:
    assert status == expected, text[:300]
    error = json.loads(text)["error"]
    assert error and "\n" not in error and "Traceback" not in error
    assert "/tmp" not in error and "/home" not in error and "/root" not in error, error
    return error


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.web.fake_runs import make_league_run

    run = make_league_run(tmp_path_factory.mktemp("hostile") / "league_run", steps=2)
    with LiveServer(WebSettings(runs=[run], max_games=32)) as live:
        yield live


@pytest.fixture(scope="module")
def saved_game() -> bytes:
    """A real saved game (the start of a game), as ``leaguezero diplomacy play`` writes one."""
    from leaguezero.diplomacy.game.env import DiplomacyEnv

    return json.dumps(DiplomacyEnv(max_years=1).to_saved_game()).encode()


# ------------------------------------------------------------------ item 1: a map is a name
def test_a_saved_game_whose_map_is_a_server_file_is_refused(server, saved_game, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would hang the server for good; /dev/zero would spin it
    for target in (str(fifo), "/etc/passwd", "../../etc/hosts"):
        hostile = {**json.loads(saved_game), "map": target}
        status, text = post(server.port, "/api/diplomacy/replays", json.dumps(hostile).encode())
        assert '"map" must be "standard"' in one_line(status, text, 400)
    status, text = post(server.port, "/api/diplomacy/replays", saved_game)  # still answering
    assert status == 200 and json.loads(text)["phase"] == "S1901M"


# ------------------------------------------------------- item 2: rebinding and cross-site writes
def test_a_rebinding_host_is_refused(server):
    for path in ("/api/runs", "/yatzy", "/api/diplomacy/agents"):
        status, text = get(server.port, path, host=f"attacker.example:{server.port}")
        assert "--allow-host" in one_line(status, text, 400)
    head = "POST /api/yatzy/games HTTP/1.1\r\nHost: attacker.example\r\nX-Leaguezero: 1"
    status, text = raw(server.port, head, b'{"agent": "greedy"}')
    one_line(status, text, 400)
    assert get(server.port, "/api/runs", host=f"localhost:{server.port}")[0] == 200


def test_cross_site_simple_posts_are_refused(server, saved_game):
    evil = "\r\nOrigin: http://attacker.example"
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"):
        # a page elsewhere: the browser adds its Origin
        status, text = post(server.port, REPLAYS, saved_game, kind=kind, extra=evil)
        assert "another site" in one_line(status, text, 403)
        # no Origin (an old browser, a redirect): still not JSON, so still refused
        status, text = post(server.port, REPLAYS, saved_game, kind=kind)
        assert "send JSON" in one_line(status, text, 415)
    status, text = post(server.port, "/api/yatzy/games", b"{}", extra=evil)  # JSON, wrong Origin
    one_line(status, text, 403)
    status, text = post(server.port, "/api/yatzy/games", b"{}", extra="\r\nOrigin: null")
    one_line(status, text, 403)
    same = f"\r\nOrigin: http://127.0.0.1:{server.port}\r\nSec-Fetch-Site: same-origin"
    status, text = post(server.port, "/api/yatzy/games", b'{"judge": false}', extra=same)
    assert status == 200, text


# -------------------------------------------------------- item 3: one bound on agent budgets
@pytest.mark.parametrize(
    "query",
    ["sims=1000000", "search=puct&sims=1000000", "budget_reroll=100000", "depth=9",
     "max_inflight_per_game=100000", "device=cuda", "nonsense=1"],
)  # fmt: skip
def test_agent_budgets_are_capped(server, query):
    body = json.dumps({"agent": f"pretrained?{query}", "judge": False}).encode()
    status, text = post(server.port, "/api/yatzy/games", body)
    assert "agent option" in one_line(status, text, 400)


# ---------------------------------- item 4: bodies, slow heads, idle connections, store, pool
def test_a_huge_body_is_refused_before_it_is_read(server):
    head = (
        f"POST /api/diplomacy/replays HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 300000000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_S) as sock:
        sock.sendall(head.encode())  # and not one byte of the 300 MB
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"over 8 MB" in answer


def test_a_chunked_body_is_cut_off_at_the_bound(server):
    head = (
        f"POST /api/yatzy/games HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (32 * 1024, b" " * 32 * 1024)
    with socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_S) as sock:
        sock.sendall(head.encode())
        try:
            for _ in range(64):  # 2 MB at most, against a 64 KB bound
                sock.sendall(chunk)
        except OSError:
            pass  # the server answered and closed
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_request_that_never_finishes_its_head_is_closed(tmp_path):
    with LiveServer(WebSettings(), request_timeout_s=1.0) as live:
        sock = socket.create_connection(("127.0.0.1", live.port), timeout=ANSWER_S)
        with sock:
            sock.sendall(f"GET /yatzy HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n".encode())
            assert sock.recv(1024) == b"", "the server kept a half-sent request open"


def test_idle_connections_cannot_lock_everyone_out(tmp_path):
    import resource

    def low_file_limit() -> None:  # the server process only: 160 files, like a small ulimit
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "web", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=low_file_limit,
    )
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # wait until it serves
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if get(port, "/api/yatzy/agents")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        for _ in range(220):  # more idle connections than the server has files
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S))
        status, _ = get(port, "/api/yatzy/agents")
        assert status == 200
    finally:
        for sock in idle:
            sock.close()
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)


def test_many_sessions_cannot_push_out_a_game_in_play():
    with LiveServer(WebSettings(max_games=4)) as server:
        _flood_the_store(server)


def _flood_the_store(server) -> None:
    victim = new_session(server.port)  # a session the server issued, as a browser gets it
    status, _, text = http(server.port, "POST", "/api/yatzy/games", b'{"judge": false}', victim)
    mine = json.loads(text)["id"]
    refused = 0
    for _ in range(12):  # each request without a cookie is a fresh session
        status, text = post(server.port, "/api/yatzy/games", b'{"judge": false}')
        refused += status == 503
    status, _, mine_now = http(server.port, "GET", f"/api/yatzy/games/{mine}", cookie=victim)
    assert status == 200, mine_now[:300]  # the victim's game is still there
    assert refused and "try again later" in json.loads(text)["error"]


def test_a_burst_of_agent_moves_gets_busy_answers_and_cheap_requests_stay_served(
    server, monkeypatch
):
    from leaguezero.web.yatzy_games import YatzyWebGame

    cookie = f"\r\nCookie: lz_session={new_session(server.port)}"
    _, text = post(server.port, "/api/yatzy/games", b'{"seat": 1, "judge": false}', extra=cookie)
    game = json.loads(text)["id"]
    gate = threading.Event()
    started = threading.Semaphore(0)
    real_step = YatzyWebGame.agent_step

    def held_step(self):  # an agent that thinks until the test lets it go
        started.release()
        gate.wait(DEADLINE_S)
        return real_step(self)

    monkeypatch.setattr(YatzyWebGame, "agent_step", held_step)
    answers: list[int] = []

    def step() -> None:
        try:
            answers.append(post(server.port, f"/api/yatzy/games/{game}/agent-step", b"{}",
                                extra=cookie)[0])  # fmt: skip
        except OSError:
            answers.append(0)

    burst = [threading.Thread(target=step) for _ in range(47)]
    try:
        for thread in burst:
            thread.start()
        assert started.acquire(timeout=DEADLINE_S), "no agent move started"
        # While the moves think: the cheap requests are answered, the extra moves told to wait.
        assert get(server.port, "/api/yatzy/agents")[0] == 200
        assert get(server.port, "/api/runs")[0] == 200
        deadline = time.monotonic() + DEADLINE_S
        while answers.count(503) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answers.count(503) >= 40, answers
    finally:
        gate.set()
        for thread in burst:
            thread.join(DEADLINE_S)
    assert answers.count(200) >= 1 and set(answers) <= {200, 400, 503}, answers


# --------------------------------------------------------- item 5: one line, no paths, no oracle
def test_bad_agents_get_one_line_without_paths_or_an_existence_oracle(server, tmp_path):
    bots = {p: "random_bot" for p in ("AUSTRIA", "ENGLAND", "GERMANY", "ITALY", "RUSSIA")}
    long_name = json.dumps({"agents": {**bots, "TURKEY": "dumb_bot", "FRANCE": "x" * 500}})
    one_line(*post(server.port, "/api/diplomacy/games", long_name.encode()), 422)
    long_name = json.dumps({"agent": "x" * 500, "judge": False}).encode()
    one_line(*post(server.port, "/api/yatzy/games", long_name), 422)
    too_long = json.dumps({"agent": "model:" + "y" * 290 + ".pt", "judge": False}).encode()
    one_line(*post(server.port, "/api/yatzy/games", too_long), 400)
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"PK\x03\x04 not a checkpoint")  # torch.load would advise weights_only
    missing = tmp_path / "missing.pt"
    answers = []
    for path in (damaged, missing, tmp_path):
        body = json.dumps({"agent": f"model:{path}", "judge": False}).encode()
        answers.append(one_line(*post(server.port, "/api/yatzy/games", body), 400))
    assert "weights_only" not in " ".join(answers)
    # one answer, whether the file exists or not (only its name differs)
    assert answers[0].replace("damaged.pt", "X") == answers[1].replace("missing.pt", "X")
    dip = []
    for path in (damaged, missing):
        body = json.dumps({"agents": {**bots, "TURKEY": str(path), "FRANCE": "dumb_bot"}})
        dip.append(one_line(*post(server.port, "/api/diplomacy/games", body.encode()), 400))
    assert dip[0].replace("damaged.pt", "X") == dip[1].replace("missing.pt", "X")
    status, text = get(server.port, "/api/runs")
    assert status == 200 and "/" not in json.dumps(json.loads(text)["runs"])
    status, text = get(server.port, "/api/runs/0")
    assert status == 200 and str(tmp_path.parent) not in text and '"path"' not in text


def test_a_yatzy_report_names_its_run_without_its_path(tmp_path):
    from tests.web.fake_runs import make_yatzy_run

    run = make_yatzy_run(tmp_path / "my_yatzy_run")
    with LiveServer(WebSettings(runs=[run])) as live:
        head = f"GET /runs/0/report HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\nConnection: close"
        with socket.create_connection(("127.0.0.1", live.port), timeout=DEADLINE_S) as sock:
            sock.sendall(head.encode() + b"\r\n\r\n")
            page = b""
            while chunk := sock.recv(1 << 16):
                page += chunk
    assert page.startswith(b"HTTP/1.1 200") and b"my_yatzy_run" in page
    assert str(tmp_path).encode() not in page
