"""`leaguezero llm serve` against hostile clients and damaged adapter folders (issue 28).

A real server process on loopback, driven with raw HTTP (``http.client``, raw sockets): failed
adapter loads leave no ghost and can be retried; FIFOs, symlinks and other users' files are
refused without blocking; every rank the config can express is checked; bodies, prompts and
connections are bounded; bad input gets a short 4xx; ``--api-key`` guards ``/v1``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("peft")
pytest.importorskip("httpx")

import torch

from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from tests.diplomacy.llm.model.test_llm_hf import perturb
from tests.diplomacy.tiny_lm import start_llm_server

torch.set_num_threads(1)
OTHER_UID = 65534  # nobody


@pytest.fixture(scope="module")
def good_adapter(tiny_lm, tmp_path_factory) -> Path:
    backend = HFBackend.from_pretrained(tiny_lm)
    backend.add_adapter("good")
    perturb(backend, "good", 1)
    return backend.save_adapter("good", tmp_path_factory.mktemp("adapters") / "good")


@pytest.fixture(scope="module")
def server(tiny_lm):
    proc, url = start_llm_server(tiny_lm, "--max-prompt-tokens", "256", "--max-connections", "8")
    yield proc, url
    proc.kill()
    proc.wait(timeout=30)


def request(
    url: str, method: str, path: str, body=None, headers=None, raw: bytes | None = None,
    timeout: float = 60,
):  # fmt: skip
    """(status, decoded JSON body) of one raw HTTP request."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    kind = {} if data is None else {"Content-Type": "application/json"}
    conn.request(method, path, body=data, headers={**kind, **(headers or {})})
    response = conn.getresponse()
    payload = json.loads(response.read() or b"null")
    conn.close()
    return response.status, payload


def models(url: str) -> list[str]:
    return [m["id"] for m in request(url, "GET", "/v1/models")[1]["data"]]


def load(url: str, name: str, folder, **headers):
    return request(
        url,
        "POST",
        "/v1/load_lora_adapter",
        {"lora_name": name, "lora_path": str(folder)},
        headers,
    )


def complete(url: str, model: str, **fields):
    body = {"model": model, "prompt": "A VIE H", "max_tokens": 2, "temperature": 0, **fields}
    return request(url, "POST", "/v1/completions", body)


def copy_adapter(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_config(folder: Path, **changes) -> None:
    """Edit the config by hand; its checksum goes (a hand-edited folder is read unchecked)."""
    meta_path = folder / "leaguezero_adapter.json"
    meta = json.loads(meta_path.read_text())
    meta.get("sha256", {}).pop("adapter_config.json", None)
    meta_path.write_text(json.dumps(meta))
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def rss_kb(proc) -> int:
    status = Path(f"/proc/{proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


def threads(proc) -> int:
    status = Path(f"/proc/{proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


def test_failed_loads_leave_no_ghost_and_can_be_retried(server, good_adapter, tmp_path) -> None:
    _, url = server
    truncated = copy_adapter(good_adapter, tmp_path / "truncated")
    weights = truncated / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    pickled = copy_adapter(good_adapter, tmp_path / "pickled")
    from safetensors.torch import load_file

    torch.save(load_file(pickled / "adapter_model.safetensors"), pickled / "adapter_model.bin")
    (pickled / "adapter_model.safetensors").unlink()
    mismatch = copy_adapter(good_adapter, tmp_path / "mismatch")
    edit_config(mismatch, rank_pattern={"q_proj": 4})  # the weights are rank 8
    for folder, why in ((truncated, "damaged"), (pickled, "pickle"), (mismatch, "does not fit")):
        status, body = load(url, "hero-v0001", folder)
        message = body["error"]["message"]
        assert status == 400 and why in message and "weights_only" not in message, message
        assert "\n" not in message and len(message) < 400
        assert "hero-v0001" not in models(url)
        assert complete(url, "hero-v0001")[0] == 404
    status, body = load(url, "hero-v0001", good_adapter)
    assert status == 200, body
    assert "hero-v0001" in models(url) and complete(url, "hero-v0001")[0] == 200
    status, body = load(url, "hero", good_adapter)  # a name that prefixes a loaded one
    assert status == 200, body
    assert request(url, "POST", "/v1/unload_lora_adapter", {"lora_name": "hero"})[0] == 200
    assert request(url, "POST", "/v1/unload_lora_adapter", {"lora_name": "hero-v0001"})[0] == 200


def test_fifos_symlinks_and_foreign_files_are_refused_without_blocking(
    server, good_adapter, tmp_path
) -> None:
    _, url = server
    fifo_bin = copy_adapter(good_adapter, tmp_path / "fifo_bin")
    (fifo_bin / "adapter_model.safetensors").unlink()
    os.mkfifo(fifo_bin / "adapter_model.bin")
    fifo_weights = copy_adapter(good_adapter, tmp_path / "fifo_weights")
    (fifo_weights / "adapter_model.safetensors").unlink()
    os.mkfifo(fifo_weights / "adapter_model.safetensors")
    for folder, why in ((fifo_bin, "pickle"), (fifo_weights, "not a regular file")):
        status, body = load(url, "fifo-v0001", folder)  # would hang forever on a blocking open
        assert status == 400 and why in body["error"]["message"], body
    assert request(url, "GET", "/health")[0] == 200 and complete(url, "tiny")[0] == 200

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"schema_version": "root-only-content"}))
    linked = copy_adapter(good_adapter, tmp_path / "linked")
    (linked / "leaguezero_adapter.json").unlink()
    (linked / "leaguezero_adapter.json").symlink_to(secret)
    status, body = load(url, "link-v0001", linked)
    assert status == 400 and "symlink" in body["error"]["message"]
    assert "root-only-content" not in body["error"]["message"]
    if os.geteuid() == 0:  # only root can give a file away to check the owner test
        foreign = copy_adapter(good_adapter, tmp_path / "foreign")
        os.chown(foreign / "leaguezero_adapter.json", OTHER_UID, OTHER_UID)
        status, body = load(url, "foreign-v0001", foreign)
        assert status == 400 and f"owned by uid {OTHER_UID}" in body["error"]["message"]
        os.chown(foreign, OTHER_UID, OTHER_UID)
        status, body = load(url, "foreign-v0001", foreign)
        assert status == 400 and f"belongs to uid {OTHER_UID}" in body["error"]["message"]
    assert not {"fifo-v0001", "link-v0001", "foreign-v0001"} & set(models(url))


def test_every_rank_the_config_expresses_is_checked_before_allocating(
    server, good_adapter, tmp_path
) -> None:
    proc, url = server
    before = rss_kb(proc)
    cases = [
        ({"rank_pattern": {"q_proj": 400000}}, "rank_pattern"),
        ({"r": 400000}, "max_lora_rank"),
        ({"r": ...}, "no 'r'"),
        ({"r": [8]}, "integer rank"),
        ({"r": True}, "integer rank"),
        ({"alpha_pattern": {"q_proj": "x"}}, "finite number"),
    ]
    for index, (changes, why) in enumerate(cases):
        folder = copy_adapter(good_adapter, tmp_path / f"case{index}")
        edit_config(folder, **changes)
        status, body = load(url, f"rank-v000{index}", folder)
        assert status == 400 and why in body["error"]["message"], (changes, body)
    # The 400000-rank pattern would have allocated ~195 MB on the tiny model's weights.
    assert rss_kb(proc) - before < 50_000
    assert not any(name.startswith("rank-") for name in models(url))


def test_bodies_and_bad_input_get_short_4xx(server) -> None:
    _, url = server
    parts = urlsplit(url)

    def raw_exchange(head: bytes) -> bytes:
        with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
            sock.sendall(head)
            return sock.recv(65536)

    start = (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    )
    assert raw_exchange(start + b"Content-Length: -1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw_exchange(start + b"\r\n").startswith(b"HTTP/1.1 411")
    assert raw_exchange(start + b"Content-Length: 268435456\r\n\r\n").startswith(b"HTTP/1.1 413")
    deep = b"[" * 100_000 + b"]" * 100_000
    status, body = request(url, "POST", "/v1/completions", raw=deep)
    assert status == 400 and "deeply" in body["error"]["message"]
    for temperature in ("NaN", "Infinity", "1e-320"):
        raw = f'{{"model": "tiny", "prompt": "A", "temperature": {temperature}}}'.encode()
        status, body = request(url, "POST", "/v1/completions", raw=raw)
        assert status == 400 and "temperature" in body["error"]["message"]
    status, body = complete(url, "tiny", prompt="A VIE H " * 200)  # > --max-prompt-tokens 256
    assert status == 400 and "max-prompt-tokens" in body["error"]["message"]
    status, body = complete(url, "tiny", prompt=["A"] * 100_000)
    assert status == 400 and "at most 256 prompts" in body["error"]["message"]
    status, body = complete(url, "tiny", prompt="x" * 7_000_000)  # refused before tokenising
    assert status == 400 and "too long" in body["error"]["message"]
    assert complete(url, "tiny")[0] == 200


def test_clients_that_go_away_are_one_line_each(tiny_lm) -> None:
    proc, url = start_llm_server(tiny_lm)
    parts = urlsplit(url)
    try:
        body = json.dumps({"model": "tiny", "prompt": "A VIE H", "max_tokens": 8}).encode()
        head = (
            "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body) + 100}\r\n\r\n"
        )
        for _ in range(20):  # a body cut short, then a reset
            sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
            sock.sendall(head.encode() + body)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            sock.close()
        assert complete(url, "tiny")[0] == 200
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr
    ours = [line for line in stderr.splitlines() if line.startswith("llm serve:")]
    assert 1 <= len(ours) <= 20 and all("went away" in line for line in ours), ours


def test_slow_clients_cannot_hold_more_than_max_connections(server) -> None:
    proc, url = server
    parts = urlsplit(url)
    baseline = threads(proc)
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    slow = []
    try:
        for _ in range(50):  # never send the rest of the body
            sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
            sock.sendall(head)
            slow.append(sock)
        deadline = time.monotonic() + 300
        while True:  # connections beyond --max-connections 8 are answered 503 at once
            try:
                status = request(url, "GET", "/health")[0]
            except (ConnectionError, http.client.HTTPException):
                status = None
            if status == 503 or time.monotonic() > deadline:
                break
        assert status == 503
        assert threads(proc) <= baseline + 8
    finally:
        for sock in slow:
            sock.close()
    # The slots come back once the clients are gone: until the server has seen them close, a
    # new connection may still be answered 503 and closed (a broken pipe under load).
    deadline = time.monotonic() + 300
    while True:
        try:
            if complete(url, "tiny")[0] == 200:
                break
        except (ConnectionError, http.client.HTTPException):
            pass
        assert time.monotonic() < deadline, "the server never gave its slots back"
        time.sleep(0.05)


def test_prompts_are_tokenised_outside_the_batcher_thread_and_health_is_true(tiny_lm) -> None:
    from leaguezero.diplomacy.llm.serve.server import LLMServer

    backend = HFBackend.from_pretrained(tiny_lm, model_name="tiny")
    seen: list[str] = []
    encode = backend.encode

    def recording_encode(prompt: str) -> list[int]:
        seen.append(threading.current_thread().name)
        return encode(prompt)

    backend.encode = recording_encode
    server = LLMServer(backend).start()
    try:
        assert complete(server.url, "tiny")[0] == 200
        assert request(server.url, "GET", "/health")[0] == 200
        server.batcher.close()  # no thread left to answer completions: /health must say so
        assert request(server.url, "GET", "/health")[0] == 503
    finally:
        server.shutdown()
    batcher_threads = {t.name for t in threading.enumerate() if "batch" in t.name.lower()}
    assert seen and not set(seen) & batcher_threads
    assert all(name.startswith("Thread-") for name in seen), seen


def test_a_trickling_client_is_cut_off_at_the_read_deadline(tiny_lm) -> None:
    from leaguezero.diplomacy.llm.serve.server import LLMServer

    server = LLMServer(HFBackend.from_pretrained(tiny_lm, model_name="tiny"))
    server.httpd.read_deadline_s = 1.0  # 60 s by default
    server.start()
    parts = urlsplit(server.url)
    head = b"POST /v1/completions HTTP/1.1\r\nX-Slow: " + b"a" * 200
    closed = False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
            for byte in head:  # a byte every 0.1 s: no single read ever times out
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                time.sleep(0.1)  # the trickle itself, not a wait for the server
            if not closed:
                sock.settimeout(60)
                try:
                    closed = sock.recv(1) == b""
                except ConnectionResetError:
                    closed = True
        assert closed  # 20 s of trickling: the 1 s deadline shut the socket
        assert complete(server.url, "tiny")[0] == 200
    finally:
        server.shutdown()


def test_api_key_guards_every_v1_route(tiny_lm, good_adapter, monkeypatch) -> None:
    proc, url = start_llm_server(tiny_lm, "--api-key", "s3cret")
    try:
        assert request(url, "GET", "/health")[0] == 200
        assert request(url, "GET", "/v1/models")[0] == 401
        assert load(url, "hero-v0001", good_adapter)[0] == 401
        assert load(url, "hero-v0001", good_adapter, Authorization="Bearer wrong")[0] == 401
        assert complete(url, "tiny")[0] == 401
        with OpenAIClient(url, api_key="s3cret") as client:
            client.load_adapter("hero-v0001", str(good_adapter))
        monkeypatch.setenv("LEAGUEZERO_LLM_API_KEY", "s3cret")
        with OpenAIClient(url) as client:  # the key from the environment
            assert client.list_adapters() == ["hero-v0001"]
            assert client.generate(["A VIE H"], ["hero-v0001"], 2, 0.0, seed=0)[0].token_ids
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_adapter_names_and_config_values_are_bounded(server, good_adapter, tmp_path) -> None:
    """Issue 41 item 6: every such load is a short 400 (never a 500), nothing is listed."""
    _, url = server
    for name in ("a" * 100_000, "two words", "line\nbreak", "dot.ted"):
        status, body = load(url, name, good_adapter)
        message = body["error"]["message"]
        assert status == 400 and "cannot name an adapter" in message, message
        assert len(message) < 200
    huge = "h" * 100_000
    status, body = complete(url, huge)
    assert status == 404 and len(body["error"]["message"]) < 200
    status, body = request(url, "POST", "/v1/unload_lora_adapter", {"lora_name": huge})
    assert status == 404 and len(body["error"]["message"]) < 200
    cases = [
        ({"alpha_pattern": {"q_proj": "Infinity"}}, "finite number"),
        ({"alpha_pattern": {"q_proj": 10**400}}, "finite number"),
        ({"lora_alpha": 10**400}, "finite number"),
        ({"lora_dropout": 5}, "lora_dropout"),
        ({"target_modules": [5]}, "target_modules"),
        ({"target_modules": ["q" * 100_000]}, "target_modules"),
        ({"exclude_modules": 5}, "exclude_modules"),
        ({"layers_to_transform": "x"}, "layers_to_transform"),
        ({"use_rslora": "yes"}, "use_rslora"),
        ({"rank_pattern": {"q" * 100_000: 4}}, "rank_pattern"),
    ]
    raw_inf = copy_adapter(good_adapter, tmp_path / "raw_inf")
    edit_config(raw_inf)  # drops the checksum
    text = (raw_inf / "adapter_config.json").read_text()
    assert '"alpha_pattern": {}' in text
    text = text.replace('"alpha_pattern": {}', '"alpha_pattern": {"q_proj": Infinity}')
    (raw_inf / "adapter_config.json").write_text(text)
    folders = [(raw_inf, "finite number")]
    for index, (changes, why) in enumerate(cases):
        folder = copy_adapter(good_adapter, tmp_path / f"value{index}")
        edit_config(folder, **changes)
        folders.append((folder, why))
    for index, (folder, why) in enumerate(folders):
        status, body = load(url, f"value-v{index:04d}", folder)
        message = body["error"]["message"]
        assert status == 400 and why in message, (folder.name, body)
        assert "\n" not in message and len(message) < 400
    assert not any(name.startswith(("value-", "aaaa")) for name in models(url))
