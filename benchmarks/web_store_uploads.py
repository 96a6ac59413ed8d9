"""What one hostile local client does to ``leaguezero web``'s game store, uploads and connections
(issue 54 items 3, 4 and 9), for the code under ``--src``.

Starts ``python -m leaguezero web`` from ``--src`` and prints, per probe, what the hostile client
got, what a good client got beside it, the time it took and the server's resident memory:

- **flood**: 7 sessions of one client (each a cookie the server set) ask for 6 games each of a
  32-game store; then a browser of another address (127.0.0.2) and a new one of the same address;
- **uploads**: four 6.5 MB saved games with 700,000 rule names at once, then 12 good Diplomacy
  game creations from another client while they are read;
- **deep JSON**: 100,000 nested ``[`` as a saved game;
- **agent folder**: the shipped LLM base model's folder named as a Diplomacy agent, by path;
- **burst**: 1,000 connections at once, one GET each: answered (200, 503) or reset.

    OMP_NUM_THREADS=1 python benchmarks/web_store_uploads.py --src src
    OMP_NUM_THREADS=1 python benchmarks/web_store_uploads.py --src /path/to/old/checkout/src

Not a test: it measures, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

TIMEOUT_S = 300.0  # a request's answer is waited on this long at most
BOTS6 = {p: "random_bot" for p in ("AUSTRIA", "ENGLAND", "GERMANY", "ITALY", "RUSSIA", "TURKEY")}


def request(port, method, path, body=None, cookie=None, source="127.0.0.1"):
    """(status, Set-Cookie session or None, body text); status 0: closed without an answer."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if cookie:
        lines.append(f"Cookie: lz_session={cookie}")
    data = b""
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=TIMEOUT_S, source_address=(source, 0)
        ) as sock:
            sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + (body or b""))
            while chunk := sock.recv(1 << 16):
                data += chunk
    except OSError:
        pass
    if not data.startswith(b"HTTP/"):
        return 0, None, ""
    head, _, text = data.partition(b"\r\n\r\n")
    session = None
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("set-cookie: lz_session="):
            session = line.split("=", 1)[1].split(";")[0]
    return int(head.split()[1]), session, text.decode(errors="replace")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def counts(statuses) -> str:
    return ", ".join(f"{s}: {statuses.count(s)}" for s in sorted(set(statuses)))


def flood(port: int) -> None:
    statuses = []
    start = time.perf_counter()
    for _ in range(7):
        _, session, _ = request(port, "GET", "/yatzy")
        for _ in range(6):
            statuses.append(
                request(port, "POST", "/api/yatzy/games", b'{"judge": false}', session)[0]
            )
    spent = time.perf_counter() - start
    other = as_another_user(port)
    same = request(port, "POST", "/api/yatzy/games", b'{"judge": false}', source="127.0.0.2")
    print(
        f"flood: 42 requests of 7 sessions in {spent:.1f} s -> {counts(statuses)}; another "
        f"local user's new game: {other}; a new browser of the same user: {same[0]}"
    )


def as_another_user(port: int) -> str:
    """A new game asked for by user nobody (a fork that drops root), same address as the
    flood; from 127.0.0.2 when not root."""
    if os.getuid() != 0:
        body = b'{"judge": false}'
        return (
            f"{request(port, 'POST', '/api/yatzy/games', body, source='127.0.0.2')[0]} (127.0.0.2)"
        )
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        status = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            status = request(port, "POST", "/api/yatzy/games", b'{"judge": false}')[0]
        finally:
            os.write(write_end, str(status).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        status = answer.read()
    os.waitpid(child, 0)
    return f"{status} (uid 65534)"


def uploads(port: int, pid: int, saved: dict) -> None:
    rules = [str(i) for i in range(700_000)]
    hostile = json.dumps({**saved, "rules": rules}, separators=(",", ":")).encode()
    answers: list[tuple[int, float]] = []
    before = rss_mb(pid)
    start = time.perf_counter()

    def upload() -> None:
        status = request(port, "POST", "/api/diplomacy/replays", hostile)[0]
        answers.append((status, time.perf_counter() - start))

    threads = [threading.Thread(target=upload) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the bodies are in: the good creations come while they are read
    _, session, _ = request(port, "GET", "/diplomacy", source="127.0.0.2")
    good = []
    body = json.dumps({"agents": {**BOTS6, "FRANCE": "random_bot"}}).encode()
    for _ in range(12):
        good.append(request(port, "POST", "/api/diplomacy/games", body, session, "127.0.0.2")[0])
    good_s = time.perf_counter() - start
    for thread in threads:
        thread.join(TIMEOUT_S)
    print(f"uploads: {len(hostile) / 2**20:.1f} MB x4 -> "
          f"{', '.join(f'{s} at {t:.1f} s' for s, t in sorted(answers, key=lambda a: a[1]))}; "
          f"12 good creations meanwhile: {counts(good)} (done at {good_s:.1f} s); "
          f"server {before:.0f} -> {rss_mb(pid):.0f} MB")  # fmt: skip


def deep_json(port: int) -> None:
    start = time.perf_counter()
    status, _, text = request(port, "POST", "/api/diplomacy/replays", b"[" * 100_000)
    print(f"deep JSON: 100,000 [ -> {status} in {time.perf_counter() - start:.2f} s: {text[:90]}")


def agent_folder(port: int, pid: int, src: Path) -> None:
    folder = src / "leaguezero" / "diplomacy" / "pretrained" / "llm" / "base"
    body = json.dumps({"agents": {**BOTS6, "FRANCE": str(folder)}}).encode()
    before = rss_mb(pid)
    start = time.perf_counter()
    status, _, text = request(port, "POST", "/api/diplomacy/games", body, source="127.0.0.3")
    print(f"agent folder: {status} in {time.perf_counter() - start:.1f} s, server "
          f"{before:.0f} -> {rss_mb(pid):.0f} MB: {text[:100]}")  # fmt: skip


def burst(port: int, count: int = 1000) -> None:
    async def one(outcomes: dict[str, int]) -> None:
        data = b""
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET /api/yatzy/agents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         "Connection: close\r\n\r\n".encode())  # fmt: skip
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
            writer.close()
        except (ConnectionError, OSError, TimeoutError):
            pass
        kind = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "reset"
        outcomes[kind] = outcomes.get(kind, 0) + 1

    async def main() -> dict[str, int]:
        outcomes: dict[str, int] = {}
        await asyncio.gather(*(one(outcomes) for _ in range(count)))
        return outcomes

    start = time.perf_counter()
    outcomes = asyncio.run(main())
    print(f"burst: {count} requests at once -> {outcomes} in {time.perf_counter() - start:.1f} s")


@contextlib.contextmanager
def serving(src: Path, port: int):
    """``leaguezero web`` from ``src`` on ``port`` (a fresh server per probe): its pid."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leaguezero", "web", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while request(port, "GET", "/api/yatzy/agents")[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.2)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("src"), help="the src/ folder to serve")
    parser.add_argument("--port", type=int, default=8391)
    args = parser.parse_args()
    src, port = args.src.resolve(), args.port
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))  # the burst's sockets
    # this folder holds a diplomacy.py of its own: the engine must not be shadowed by it
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(src), *(p for p in sys.path if Path(p or ".").resolve() != here)]
    from leaguezero.diplomacy.game.env import DiplomacyEnv

    print(f"serving {src}")
    with serving(src, port):
        flood(port)
    with serving(src, port) as pid:
        uploads(port, pid, DiplomacyEnv(max_years=1).to_saved_game())
    with serving(src, port) as pid:
        deep_json(port)
        agent_folder(port, pid, src)
    with serving(src, port):
        burst(port)


if __name__ == "__main__":
    main()
