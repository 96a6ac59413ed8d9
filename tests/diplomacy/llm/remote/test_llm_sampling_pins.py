"""The policy that samples is the policy the trainer scores, on whatever server runs (issue 39).

Shows: the JSON the client sends pins every sampling field vLLM would otherwise take from the
model's ``generation_config.json`` (captured by a real HTTP server on loopback); ``llm serve``
takes the same fields at their neutral values and refuses others, and lists each adapter's
folder as vLLM does; served adapter names are unique per run, not per folder name; a name the
server lists with another folder is loaded again from the expected one; after a server
restart a completion that names a forgotten adapter loads it again and goes on.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
pytest.importorskip("httpx")

import httpx
import torch

from leaguezero.diplomacy.llm.client import NEUTRAL_SAMPLING, LLMError
from leaguezero.diplomacy.llm.remote.adapters import RUN_ID_FILE, AdapterSlots, run_prefix
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from tests.diplomacy.tiny_lm import start_llm_server

torch.set_num_threads(1)


class _Recorder(BaseHTTPRequestHandler):
    """Answers like vLLM and keeps every JSON body it was sent."""

    bodies: ClassVar[list[dict]] = []

    def log_message(self, format, *args):
        pass

    def _reply(self, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply({"data": [{"id": "base", "parent": None}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        self._reply(
            {
                "choices": [
                    {
                        "text": "x",
                        "token_ids": [5],
                        "logprobs": {"token_logprobs": [-0.5]},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3},
            }
        )


def test_every_completion_request_pins_the_sampled_distribution() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with OpenAIClient(url) as client:
            done = client.generate(["a", "b"], [None, "hero-v0001"], 8, 0.7, seed=3)
        assert [c.token_ids for c in done] == [[5], [5]]
    finally:
        server.shutdown()
        server.server_close()
    sent = _Recorder.bodies
    assert len(sent) == 2
    for body in sent:
        for name, value in NEUTRAL_SAMPLING.items():
            assert body[name] == value, name
        assert body["temperature"] == 0.7 and body["max_tokens"] == 8
    # top_p 1, top_k 0 (disabled), min_p 0, penalties neutral: nothing left for vLLM to fill
    # in from generation_config.json (--generation-config auto, its default).
    assert NEUTRAL_SAMPLING == {
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert {b["model"] for b in sent} == {"base", "hero-v0001"}


@pytest.fixture
def served(tiny_lm):
    proc, url = start_llm_server(tiny_lm)
    yield proc, url
    proc.terminate()
    proc.wait(timeout=30)


def _complete(url: str, **fields) -> httpx.Response:
    body = {"model": "tiny", "prompt": "A PAR", "max_tokens": 2, "temperature": 1.0, **fields}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def test_llm_serve_takes_the_pinned_fields_and_refuses_what_it_does_not_sample(served):
    _, url = served
    assert _complete(url, **NEUTRAL_SAMPLING).status_code == 200
    assert _complete(url, top_k=-1).status_code == 200  # vLLM's older spelling of "disabled"
    refused = {
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.2,
        "stop": ["\n"],
        "logit_bias": {"5": 2.0},
        "min_tokens": 1,
        "best_of": 2,
    }
    for name, value in refused.items():
        reply = _complete(url, **{name: value})
        assert reply.status_code == 400, name
        message = reply.json()["error"]["message"]
        assert name in message and "not supported" in message
    assert _complete(url, top_p="high").status_code == 400
    assert _complete(url, stop=[], min_tokens=0, best_of=1, ignore_eos=False).status_code == 200


def test_names_are_unique_per_run_and_a_listed_name_serves_the_expected_folder(
    served, adapter_dirs, tmp_path
):
    # Two runs whose folders share a name (compose's default --out is .../runs/llm).
    first, second = tmp_path / "a" / "llm", tmp_path / "b" / "llm"
    prefix = run_prefix(first)
    assert prefix.startswith("llm-") and prefix.endswith("-hero")
    assert run_prefix(second) != prefix
    assert run_prefix(first) == prefix  # kept in the run folder: a resume goes on with it
    assert (first / RUN_ID_FILE).is_file()

    _, url = served
    with OpenAIClient(url) as client:
        # vLLM's model cards give each adapter's folder as `root`; llm serve does too.
        client.load_adapter("x-v0001", adapter_dirs["austria-v0001"])
        assert client.adapter_roots() == {"x-v0001": adapter_dirs["austria-v0001"]}
        before = client.generate(["A PAR"], ["x-v0001"], 6, 0.0, seed=0)[0]
        # Someone else's weights under the name this run expects: loaded again from ours.
        slots = AdapterSlots(client, max_loras=2, owned_only=True)
        slots.ensure({"x-v0001": adapter_dirs["england-v0001"]})
        assert client.adapter_roots() == {"x-v0001": adapter_dirs["england-v0001"]}
        after = client.generate(["A PAR"], ["x-v0001"], 6, 0.0, seed=0)[0]
        assert before.logprobs != after.logprobs  # other weights answer now
        slots.ensure({"x-v0001": adapter_dirs["england-v0001"]})  # already right: left alone
        assert client.adapter_roots() == {"x-v0001": adapter_dirs["england-v0001"]}


def test_after_a_server_restart_a_forgotten_adapter_is_loaded_again(tiny_lm, adapter_dirs):
    proc, url = start_llm_server(tiny_lm)
    port = url.rsplit(":", 1)[1]
    try:
        with OpenAIClient(url, reconnect_s=120.0) as client:
            slots = AdapterSlots(client, max_loras=2, owned_only=True)
            client.reloader = slots.reload
            slots.ensure({"hero-v0001": adapter_dirs["austria-v0001"]})
            first = client.generate(["A PAR"], ["hero-v0001"], 6, 0.0, seed=0)[0]
            proc.terminate()
            proc.wait(timeout=30)
            proc, again = start_llm_server(tiny_lm, "--port", port)
            assert again == url
            assert client.list_adapters() == []  # the new server knows no adapter
            # The completion names it: loaded again from its folder, then answered.
            second = client.generate(["A PAR"], ["hero-v0001"], 6, 0.0, seed=0)[0]
            assert second.token_ids == first.token_ids
            assert client.adapter_roots() == {"hero-v0001": adapter_dirs["austria-v0001"]}
            # A name this client never ensured is not its to load: the error stands.
            with pytest.raises(LLMError, match="does not exist"):
                client.generate(["A PAR"], ["ghost-v0001"], 2, 0.0, seed=0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
