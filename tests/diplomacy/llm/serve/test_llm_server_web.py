"""`llm serve` refuses what a web page can send (issue 41 item 2), over raw sockets.

A page in a browser on the server's machine can POST ``text/plain`` to a loopback port without a
CORS preflight, and by DNS rebinding reach it under its own host name. Every request needs an
allowed ``Host`` (421 otherwise) and every POST ``Content-Type: application/json`` (415).
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

pytest.importorskip("peft")

import torch

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.serve.server import LLMServer
from tests.diplomacy.tiny_lm import build_tiny_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    return HFBackend.from_pretrained(
        build_tiny_lm(tmp_path_factory.mktemp("tiny_lm")), model_name="tiny"
    )


def exchange(url: str, method: str, path: str, headers: dict, body: bytes = b"") -> int:
    """The status of one request written by hand (headers exactly as given)."""
    parts = urlsplit(url)
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(data)
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1])


COMPLETION = json.dumps({"model": "tiny", "prompt": "A VIE H", "max_tokens": 2}).encode()


def test_cross_site_requests_are_refused(backend) -> None:
    backend.add_adapter("hero-v0001")
    server = LLMServer(backend).start()
    url, port = server.url, urlsplit(server.url).port
    local = {"Host": f"127.0.0.1:{port}"}
    json_kind = {"Content-Type": "application/json"}
    try:
        unload = json.dumps({"lora_name": "hero-v0001"}).encode()
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {**local, **({"Content-Type": kind} if kind else {})}
            assert exchange(url, "POST", "/v1/completions", headers, COMPLETION) == 415
            assert exchange(url, "POST", "/v1/unload_lora_adapter", headers, unload) == 415
        assert "hero-v0001" in backend.list_adapters()
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", ""):
            bad = {"Host": host}
            assert exchange(url, "GET", "/v1/models", bad) == 421, host
            assert exchange(url, "GET", "/health", bad) == 421, host
            assert exchange(url, "POST", "/v1/completions", {**bad, **json_kind}, COMPLETION) == 421
        assert exchange(url, "GET", "/v1/models", {}) == 421  # no Host at all
        two = f"Host: 127.0.0.1\r\nHost: evil.example:{port}"
        assert exchange(url, "GET", "/v1/models", {"X": "y\r\n" + two}) == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            assert exchange(url, "GET", "/v1/models", {"Host": host}) == 200, host
        assert exchange(url, "POST", "/v1/completions", {**local, **json_kind}, COMPLETION) == 200
        kind = {"Content-Type": "application/json; charset=utf-8"}
        assert exchange(url, "POST", "/v1/unload_lora_adapter", {**local, **kind}, unload) == 200
    finally:
        server.shutdown()


def test_allowed_hosts_add_names_and_star_allows_any(backend) -> None:
    server = LLMServer(backend, allowed_hosts=["llm-server"]).start()
    try:
        assert exchange(server.url, "GET", "/v1/models", {"Host": "llm-server:8000"}) == 200
        assert exchange(server.url, "GET", "/v1/models", {"Host": "other:8000"}) == 421
    finally:
        server.shutdown()
    server = LLMServer(backend, allowed_hosts=["*"]).start()
    try:
        assert exchange(server.url, "GET", "/v1/models", {"Host": "other:8000"}) == 200
        headers = {"Host": "other", "Content-Type": "text/plain"}
        assert exchange(server.url, "POST", "/v1/completions", headers, COMPLETION) == 415
    finally:
        server.shutdown()
