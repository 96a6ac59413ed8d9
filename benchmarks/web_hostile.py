"""What hostile requests cost ``leaguezero web``: the server's memory and a good request's latency
beside each probe of issue 40 (items 3 and 4), for the code under ``--src``.

Starts ``python -m leaguezero web`` from ``--src`` with a 1,024 open-file limit, then for each probe
prints the probe's answer, the server's resident memory before and after, and the latency of a
cheap request (``GET /api/yatzy/agents``) made while the probe is under way. Compare two versions
by running it once per ``--src`` on the same machine::

    OMP_NUM_THREADS=1 python benchmarks/web_hostile.py --src src
    OMP_NUM_THREADS=1 python benchmarks/web_hostile.py --src /path/to/old/checkout/src

Not a test: it measures, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

GOOD_TIMEOUT_S = 10.0  # a good request that takes longer is reported as "no answer"


def _request(port: int, head: str, body: bytes = b"", timeout: float = GOOD_TIMEOUT_S):
    """(status, seconds); status 0 for no answer within ``timeout``."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(
                f"{head}\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            data = sock.recv(65536)
        status = int(data.split()[1]) if data else 0
    except OSError:
        status = 0
    return status, time.perf_counter() - start


def good(port: int, n: int = 5) -> str:
    """A cheap request's latency: median and worst of ``n``, or how many got no answer."""
    runs = [_request(port, "GET /api/yatzy/agents HTTP/1.1") for _ in range(n)]
    times = [t for s, t in runs if s == 200]
    lost = n - len(times)
    if not times:
        return f"no answer within {GOOD_TIMEOUT_S:g} s ({n} of {n})"
    text = f"median {1000 * statistics.median(times):.0f} ms, max {1000 * max(times):.0f} ms"
    others = sorted(s for s, _ in runs if s != 200)
    return text + (f", {lost} of {n} not answered 200 ({others})" if lost else "")


def issued_session(port: int) -> str:
    """A session id as a browser gets one: the cookie a page load sets (the server's own)."""
    with socket.create_connection(("127.0.0.1", port), timeout=GOOD_TIMEOUT_S) as sock:
        sock.sendall(f"GET /yatzy HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and (chunk := sock.recv(65536)):
            head += chunk
    for line in head.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"set-cookie: lz_session="):
            return line.split(b"=", 1)[1].split(b";")[0].decode()
    return ""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def post_json(port: int, path: str, body: dict, cookie: str = "", timeout: float = 120.0):
    head = f"POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nX-Leaguezero: 1"
    if cookie:
        head += f"\r\nCookie: lz_session={cookie}"
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        raw = json.dumps(body).encode()
        sock.sendall(
            f"{head}\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head_part, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(x.split(b":")[1])
                for x in head_part.split(b"\r\n")
                if x.lower().startswith(b"content-length")
            ),
            0,
        )
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    status = int(data.split()[1]) if data else 0
    return status, rest, time.perf_counter() - start


def during(port: int, action) -> str:
    """A good request's latency while ``action()`` runs in a thread."""
    worker = threading.Thread(target=action, daemon=True)
    worker.start()
    time.sleep(0.5)  # the probe is under way (a benchmark, not a test: a fixed pause is fine)
    text = good(port)
    worker.join(300)
    return text


def puct_checkpoint(src: str) -> str:
    """A fresh PUCT (schema 1) Yatzy network saved in a temporary folder, by the code of ``src``."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="web_hostile_")
    code = (
        "import sys; from leaguezero.az.checkpoint import save_checkpoint; "
        "from leaguezero.common.config import load_config; "
        "from leaguezero.yatzy.config import YatzyConfig; "
        "from leaguezero.yatzy.net.schema import build_network, checkpoint_schema; "
        "cfg = load_config(YatzyConfig, None, ['search.kind=puct']); net = build_network(cfg, 0); "
        "save_checkpoint(sys.argv[1], net, kind=net.kind, kwargs=net.kwargs(), "
        "schema=checkpoint_schema('puct'))"
    )
    path = os.path.join(folder, "puct.pt")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    subprocess.run([sys.executable, "-c", code, path], env=env, check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="the src/ folder of the version to measure")
    parser.add_argument("--port", type=int, default=18765)
    args = parser.parse_args()
    port = args.port
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )

    def file_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.src), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "web", "--port", str(port), "--max-games", "64"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=file_limit,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _request(port, "GET /api/yatzy/agents HTTP/1.1", timeout=2)[0] != 200:
            assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
            time.sleep(0.2)
        print(f"code: {args.src}")
        print(f"idle server: {rss_mb(proc.pid):.0f} MB; good request: {good(port, 20)}")

        # item 3: a budget past the form's cap, on a PUCT network (the search that allocates it)
        before = rss_mb(proc.pid)
        spec = f"model:{puct_checkpoint(args.src)}?sims=1000000"
        status, _, took = post_json(
            port, "/api/yatzy/games", {"agent": spec, "judge": False, "seat": 1}
        )  # building the agent allocates the search for its budget
        grown = rss_mb(proc.pid) - before
        print(
            f"new game, PUCT net, sims=1000000: answer {status} in {took:.2f} s, "
            f"server +{grown:.0f} MB"
        )

        # item 4: a 300 MB body
        def upload() -> None:
            head = (
                f"POST /api/diplomacy/replays HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 300000000\r\n\r\n"
            )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
                    sock.sendall(head.encode())
                    block = b" " * (1 << 20)
                    for _ in range(300):
                        sock.sendall(block)
                    sock.recv(1024)
            except OSError:
                pass

        before = rss_mb(proc.pid)
        text = during(port, upload)
        grown = rss_mb(proc.pid) - before
        print(f"300 MB upload: server +{grown:.0f} MB; good request meanwhile: {text}")

        # item 4: 47 concurrent agent moves (pretrained, two turns deep) on 16 games: one
        # client holds at most half the store, in 4 sessions the server issued (issue 54)
        sessions = [issued_session(port) for _ in range(4)]
        games = []
        for i in range(16):
            status, body, _ = post_json(
                port, "/api/yatzy/games", {"agent": "pretrained", "judge": False, "seat": 1},
                cookie=sessions[i // 4],
            )  # fmt: skip
            if status == 200:
                games.append((json.loads(body)["id"], sessions[i // 4]))
        games = [games[i % len(games)] for i in range(47)] if games else []
        answers: list[int] = []

        def burst() -> None:
            def step(game: str, cookie: str) -> None:
                answers.append(
                    post_json(port, f"/api/yatzy/games/{game}/agent-step", {}, cookie)[0]
                )

            threads = [threading.Thread(target=step, args=g) for g in games]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)

        before = rss_mb(proc.pid)
        text = during(port, burst)
        counts = {s: answers.count(s) for s in sorted(set(answers))}
        print(
            f"{len(games)} concurrent agent moves: answers {counts}, server "
            f"+{rss_mb(proc.pid) - before:.0f} MB; good request meanwhile: {text}"
        )

        # item 4: 1,100 idle connections against the server's 1,024 open files
        idle = []
        try:
            for _ in range(1100):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError as err:
            print(f"(opened {len(idle)} idle connections: {err})")
        files = len(os.listdir(f"/proc/{proc.pid}/fd"))
        print(f"{len(idle)} idle connections ({files} server files): good request: {good(port)}")
        for sock in idle:
            sock.close()
        print(f"after: server {rss_mb(proc.pid):.0f} MB; good request: {good(port)}")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
