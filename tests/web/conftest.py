"""The web app as a real server on a free port, and a real headless chromium driving it.

Browser tests skip (with the reason) when chromium, its driver or selenium is missing; `.ci/run`
installs them and sets ``LEAGUEZERO_REQUIRE_BROWSER=1``, which turns that skip into a failure.
Screenshots go to a temporary folder, or to docs/figures/ with ``LEAGUEZERO_SCREENSHOTS=1`` (how
the figures in docs/guides/web.md are regenerated).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web extra (fastapi, uvicorn) is not installed")

from leaguezero.web.app import WebSettings, create_app

CHROMIUM = os.environ.get("LEAGUEZERO_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LEAGUEZERO_CHROMEDRIVER", "/usr/bin/chromedriver")
FIGURES = Path(__file__).resolve().parents[2] / "docs" / "figures"
DEADLINE_S = (
    120.0  # generous: the machine may be loaded; waits end as soon as their condition holds
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    cookie: str | None = None,
    source: str = "127.0.0.1",
) -> tuple[int, dict[str, str], str]:
    """One request on a fresh connection from ``source``: (status, headers, body text); status 0
    when the server closed the connection without answering."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if cookie is not None:
        lines.append(f"Cookie: lz_session={cookie}")
    with socket.create_connection(
        ("127.0.0.1", port), timeout=DEADLINE_S, source_address=(source, 0)
    ) as sock:
        sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + (body or b""))
        data = b""
        try:
            while chunk := sock.recv(1 << 16):
                data += chunk
        except ConnectionResetError:
            pass
    if not data.startswith(b"HTTP/"):
        return 0, {}, ""  # closed without an answer
    head, _, text = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    return int(status_line.split()[1]), headers, text.decode(errors="replace")


def issued_session(headers: dict[str, str]) -> str | None:
    """The session id a ``Set-Cookie`` header gives, if any."""
    cookie = headers.get("set-cookie", "")
    return cookie.split(";")[0].partition("=")[2] if cookie.startswith("lz_session=") else None


def new_session(port: int, source: str = "127.0.0.1") -> str:
    """A session as a browser gets one: load a page, keep the cookie it sets."""
    status, headers, _ = http(port, "GET", "/yatzy", source=source)
    assert status == 200
    session = issued_session(headers)
    assert session, headers
    return session


class LiveServer:
    """uvicorn serving ``create_app(settings)`` in a thread, on 127.0.0.1 and a free port, with
    the limits ``leaguezero web`` runs with (``web/server.py``; ``bounds`` override some)."""

    def __init__(self, settings: WebSettings, **bounds) -> None:
        import uvicorn

        from leaguezero.web.server import uvicorn_config

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn_config(self.app, "127.0.0.1", self.port, **bounds))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + DEADLINE_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start")
            time.sleep(0.05)  # polling a condition, not waiting a fixed time
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=DEADLINE_S)


@pytest.fixture(scope="session")
def web_runs(tmp_path_factory) -> list[Path]:
    """Run directories the server follows (filled by the run-page tests' helpers)."""
    from tests.web.fake_runs import make_league_run, make_yatzy_run

    root = tmp_path_factory.mktemp("web_runs")
    # the Yatzy run has a best network (the shipped one): the play page offers it as run:0
    return [
        make_yatzy_run(root / "yatzy_run", with_best=True),
        make_league_run(root / "league_run"),
    ]


@pytest.fixture(scope="session")
def live_server(web_runs) -> Iterator[LiveServer]:
    # 16: one browser (one client) may hold half of them, more than any browser test keeps
    with LiveServer(WebSettings(runs=web_runs, max_games=16)) as server:
        yield server


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """A headless chromium under selenium, with a fresh profile and no network chatter."""
    missing = None
    try:
        from selenium import webdriver
    except ImportError:
        missing = "selenium is not installed (pip install -e '.[dev]')"
    if missing is None and not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        missing = f"no chromium/chromedriver at {CHROMIUM}, {CHROMEDRIVER} (.ci/run installs them)"
    if missing is not None:
        if os.environ.get("LEAGUEZERO_REQUIRE_BROWSER") == "1":  # CI: never skip silently
            pytest.fail(missing)
        pytest.skip(missing)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium_profile')}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(DEADLINE_S)
    yield driver
    driver.quit()


def wait_for(driver, condition, message: str, timeout: float = DEADLINE_S):
    """Wait until ``condition(driver)`` is truthy (returns it); fails with ``message``."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page that redraws may swap an element between finding and reading it: look again.
    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    )
    return wait.until(condition, message)


def screenshot(driver, name: str, tmp_path: Path, scroll_to: str | None = None) -> Path:
    """Save the page as NAME.png: under docs/figures/ with LEAGUEZERO_SCREENSHOTS=1, else tmp;
    scrolled to the top, or to the element with id ``scroll_to``."""
    folder = FIGURES if os.environ.get("LEAGUEZERO_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    if scroll_to:
        driver.execute_script(f"document.getElementById('{scroll_to}').scrollIntoView()")
    else:
        driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path
