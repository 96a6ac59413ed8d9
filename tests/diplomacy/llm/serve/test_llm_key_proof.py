"""No secret to an unproven peer (issue 54 item 1): the client of ``llm serve --api-key``
proves the key and wants it proven back (:mod:`leaguezero.diplomacy.llm.serve.key_proof`).

A real server process on a loopback port is killed and a "squatter" binds the same port: a
real socket that answers like ``llm serve`` (its headers, a made-up completion, a made-up
proof) and records what it was sent. The client must not send it the key nor the prompt,
must not take its completion, and must fail in one line; the real server started again on
the port serves the same client again. Beside it: the server's side of the proof (replays,
stale stamps, a body swapped under a proof, the plain key of vLLM's clients) and the
``bearer`` mode for vLLM.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

pytest.importorskip("peft")
pytest.importorskip("httpx")

from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.serve import key_proof
from tests.diplomacy.tiny_lm import start_llm_server

KEY = "s3cret-key-of-the-league"
PROMPT = "A VIE H"


class Squatter(ThreadingHTTPServer):
    """Answers every request as ``llm serve`` would look, and records what it got."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, port: int, advertise: bool = True) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        squatter = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, payload: dict) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                squatter.seen.append((self.command, self.path, dict(self.headers), body))
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if advertise:  # as llm serve: a proof, made up (it has no key to sign)
                    self.send_header(key_proof.ADVERTISE_HEADER, key_proof.ADVERTISED)
                    self.send_header(key_proof.PROOF_HEADER, "0" * 64)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer({"object": "list", "data": [{"id": "tiny", "parent": None}]})

            def do_POST(self) -> None:
                choice = {"text": "A VIE - TRI", "token_ids": [1, 2], "finish_reason": "stop",
                          "logprobs": {"token_logprobs": [0.0, 0.0]}}  # fmt: skip
                self._answer({"choices": [choice], "usage": {"prompt_tokens": 3}})

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def stop(proc) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_a_squatter_on_the_port_gets_neither_key_nor_prompt_and_is_not_believed(tiny_lm) -> None:
    proc, url = start_llm_server(tiny_lm, "--api-key", KEY)
    port = urlsplit(url).port
    client = OpenAIClient(url, api_key=KEY, reconnect_s=60)
    try:
        real = client.generate([PROMPT], [None], 2, 0.0, seed=0)[0]
        assert real.token_ids
        stop(proc)  # the server restarts ...
        squatter = Squatter(port)  # ... and another program binds its port first
        try:
            with pytest.raises(LLMError) as refused:
                client.generate([PROMPT], [None], 2, 0.0, seed=0)
        finally:
            squatter.close()
        message = str(refused.value)
        print(f"refused: {message}")
        assert "\n" not in message and "without proving it holds the API key" in message
        assert squatter.seen, "the squatter was never asked: the test proves nothing"
        for method, path, headers, body in squatter.seen:
            sent = json.dumps(headers) + body.decode("utf-8", "replace")
            assert KEY not in sent  # the key never leaves the client
            assert PROMPT not in sent and (method, path) == ("GET", "/v1/models")
        print(f"squatter saw: {[(m, p) for m, p, _, _ in squatter.seen]}")
        proc, _ = start_llm_server(tiny_lm, "--api-key", KEY, "--port", str(port))
        again = client.generate([PROMPT], [None], 2, 0.0, seed=0)[0]  # the real one is back
        assert again.token_ids == real.token_ids
    finally:
        client.close()
        stop(proc)


def raw(url: str, method: str, path: str, body: bytes | None, authorization: str):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Authorization": authorization}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, dict(response.headers), data


def test_the_server_checks_each_proof_once_and_signs_its_answers(tiny_lm) -> None:
    proc, url = start_llm_server(tiny_lm, "--api-key", KEY)
    try:
        auth, mac = key_proof.sign_request(KEY, "GET", "/v1/models", b"")
        status, headers, data = raw(url, "GET", "/v1/models", None, auth)
        assert status == 200
        assert key_proof.proven(KEY, mac, status, data, headers.get(key_proof.PROOF_HEADER))
        assert not key_proof.proven("other", mac, status, data, headers[key_proof.PROOF_HEADER])
        status, _, data = raw(url, "GET", "/v1/models", None, auth)  # the same request again
        assert status == 401 and b"replay" in data
        wrong, _ = key_proof.sign_request("not-the-key", "GET", "/v1/models", b"")
        status, headers, _ = raw(url, "GET", "/v1/models", None, wrong)
        assert status == 401 and key_proof.PROOF_HEADER not in headers
        body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 1}).encode()
        auth, _ = key_proof.sign_request(KEY, "POST", "/v1/completions", body)
        swapped = body.replace(b"A VIE H", b"A BUD H")  # a relay changing the prompt
        status, _, data = raw(url, "POST", "/v1/completions", swapped, auth)
        assert status == 401 and b"not the one its proof names" in data
        # vLLM's clients (curl, the OpenAI SDKs) still send the plain key.
        assert raw(url, "GET", "/v1/models", None, f"Bearer {KEY}")[0] == 200
        assert raw(url, "GET", "/v1/models", None, "Bearer wrong")[0] == 401
    finally:
        stop(proc)


def test_replay_guard_refuses_stale_stamps_and_replays_within_its_bound() -> None:
    guard = key_proof.ReplayGuard(entries=2, skew_s=60)
    assert guard.check("a" * 32, 1000, now=1000) == ""
    assert "replay" in guard.check("a" * 32, 1000, now=1000)
    assert "synchronise the clocks" in guard.check("b" * 32, 900, now=1000)
    assert guard.check("b" * 32, 1001, now=1001) == ""
    assert guard.check("c" * 32, 1002, now=1002) == ""  # full: "a" dropped, its time a floor
    assert "replay" in guard.check("a" * 32, 1000, now=1002)


def test_bearer_mode_is_for_third_party_servers_only(tiny_lm) -> None:
    """A server that is not ``llm serve`` (here the squatter stands for vLLM) is refused in
    proof mode with a line that names the bearer mode; in bearer mode the key goes as is."""
    squatter = Squatter(0, advertise=False)
    url = f"http://127.0.0.1:{squatter.server_address[1]}"
    try:
        refused = pytest.raises(LLMError, match="LEAGUEZERO_LLM_KEY_MODE=bearer")
        with OpenAIClient(url, api_key=KEY) as client, refused:
            client.models()
        assert all(KEY not in json.dumps(headers) for _, _, headers, _ in squatter.seen)
        with OpenAIClient(url, api_key=KEY, key_mode="bearer") as client:
            assert client.models()[0]["id"] == "tiny"
        assert squatter.seen[-1][2].get("Authorization") == f"Bearer {KEY}"
        with pytest.raises(LLMError, match="mode"):
            OpenAIClient(url, api_key=KEY, key_mode="plain")
    finally:
        squatter.close()


def test_a_429_is_retried_until_the_server_takes_the_request() -> None:
    """``llm serve`` answers 429 to a client (a uid) with its bound of compiles running; the
    client retries with growing pauses rather than failing the seat."""
    answers = [429, 429, 200]

    class Busy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            status = answers.pop(0)
            data = json.dumps({"data": [{"id": "tiny", "parent": None}]}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with OpenAIClient(url, api_key="", reconnect_s=600) as client:
            assert client.models()[0]["id"] == "tiny"
        assert answers == []
    finally:
        server.shutdown()
        server.server_close()
