"""The batcher's adapter cap (vLLM's --max-loras) and adapter slots shared by two processes."""

from __future__ import annotations

import threading

from leaguezero.diplomacy.llm.client import Completion, GenerationRequest
from leaguezero.diplomacy.llm.model.batching import BatchingGenerator
from leaguezero.diplomacy.llm.remote.adapters import AdapterSlots


class RecordingBackend:
    """Completes rows at once and remembers which adapters each batch held."""

    def __init__(self) -> None:
        self.batches: list[set[str | None]] = []
        self.gate = threading.Event()

    def generate_rows(self, rows: list[GenerationRequest]) -> list[Completion]:
        self.gate.wait(timeout=60)  # hold the first batch until every job is queued
        self.batches.append({r.adapter for r in rows})
        return [Completion(r.prompt, [1], [-0.5], "stop", 1, r.adapter) for r in rows]


def test_a_batch_never_mixes_more_adapters_than_max_loras() -> None:
    backend = RecordingBackend()
    batcher = BatchingGenerator(backend, max_batch=64, wait_s=0.05, max_adapters=2)
    names = ["a", "b", "c", "d", None, "a", "c"]
    results: dict[int, list[Completion]] = {}

    def call(i: int, name: str | None) -> None:
        results[i] = batcher.generate([f"p{i}"], [name], 4, 1.0, i)

    threads = [threading.Thread(target=call, args=(i, n)) for i, n in enumerate(names)]
    for t in threads:
        t.start()
    backend.gate.set()
    for t in threads:
        t.join(timeout=60)
    batcher.close()
    assert sorted(results) == list(range(len(names)))
    assert all(results[i][0].text == f"p{i}" for i in results)  # each caller got its own row
    assert all(len(batch - {None}) <= 2 for batch in backend.batches)
    assert batcher.max_adapters_seen <= 2 and batcher.rows == len(names)


class FakeServer:
    def __init__(self) -> None:
        self.loaded: dict[str, str] = {}

    def list_adapters(self) -> list[str]:
        return list(self.loaded)

    def load_adapter(self, name: str, path: str) -> None:
        self.loaded[name] = path

    def unload_adapter(self, name: str) -> None:
        del self.loaded[name]


def test_owned_slots_never_unload_another_clients_adapters() -> None:
    server = FakeServer()
    trainer = AdapterSlots(server, 2, owned_only=True)
    evaluator = AdapterSlots(server, 2, owned_only=True)
    trainer.ensure({"hero-v0001": "/h1"})
    trainer.pinned.add("hero-v0001")
    evaluator.ensure({"eval-x": "/x"})
    evaluator.ensure({"eval-y": "/y"})
    evaluator.ensure({"eval-z": "/z"})  # evicts its own least recently used, not the hero
    assert "hero-v0001" in server.loaded and "eval-x" not in server.loaded
    trainer.ensure({"opp": "/o"})
    assert {"hero-v0001", "opp", "eval-y", "eval-z"} == set(server.loaded)
