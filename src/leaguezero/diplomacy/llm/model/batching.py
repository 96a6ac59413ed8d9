"""Rows from concurrent callers, run as one mixed-adapter batch.

Games played in threads (or HTTP requests handled in threads) each ask for a few completions
at a time; :class:`BatchingGenerator` queues them and a single worker runs whatever is waiting
as one backend batch (up to ``max_batch`` rows, waiting at most ``wait_s`` for more), the way
vLLM's scheduler fills a GPU batch. Each row keeps its own seed, so results do not depend on
which rows happened to share a batch.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from leaguezero.diplomacy.llm.client import Completion, GenerationRequest, make_requests


class RowBackend(Protocol):
    """A backend that completes heterogeneous rows (e.g. :class:`.hf_backend.HFBackend`)."""

    def generate_rows(self, rows: Sequence[GenerationRequest]) -> list[Completion]: ...


@dataclass
class _Job:
    rows: list[GenerationRequest]
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Completion] | None = None
    error: BaseException | None = None


class BatchingGenerator:
    """Merge concurrent :meth:`submit` calls into backend batches (one worker thread)."""

    def __init__(
        self,
        backend: RowBackend,
        *,
        max_batch: int = 32,
        wait_s: float = 0.005,
        max_adapters: int | None = None,
    ):
        self.backend = backend
        self.max_batch = max_batch
        self.wait_s = wait_s
        # vLLM's --max-loras: distinct adapters in one batch (the base model is not one);
        # a job that would exceed it waits for the next batch.
        self.max_adapters = max_adapters
        self._deferred: list[_Job] = []
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="llm-batcher", daemon=True)
        self._closed = False
        self.batches = 0  # batches run, for tests and logs
        self.rows = 0
        self.max_rows_seen = 0
        self.max_adapters_seen = 0  # distinct adapters (not the base) in one batch, at most
        self._worker.start()

    def submit(self, rows: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete ``rows`` (blocking); errors of this call's rows are raised here."""
        if self._closed:
            raise RuntimeError("the batching generator is closed")
        job = _Job(list(rows))
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def generate(
        self,
        prompts: Sequence[str],
        adapters: Sequence[str | None],
        max_new_tokens: int,
        temperature: float,
        seed: int,
        choices: Sequence[object | None] | None = None,
    ) -> list[Completion]:
        """The :class:`~leaguezero.diplomacy.llm.client.GenerationClient` call, through the
        batcher."""
        rows = make_requests(prompts, adapters, max_new_tokens, temperature, seed, choices)
        return self.submit(rows)

    def close(self) -> None:
        """Stop the worker after the queued jobs."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._worker.join(timeout=30)

    def _run(self) -> None:
        stop = False
        while not stop or self._deferred:
            if self._deferred:
                first = self._deferred.pop(0)
            else:
                first = self._queue.get()
                if first is None:
                    return
            jobs = [first]
            count = len(first.rows)
            adapters = self._adapters(first)
            waiting, self._deferred = self._deferred, []
            for job in waiting:  # jobs deferred by the adapter cap go first
                if count >= self.max_batch or not self._fits(adapters, job):
                    self._deferred.append(job)
                    continue
                jobs.append(job)
                count += len(job.rows)
                adapters |= self._adapters(job)
            deadline = time.monotonic() + self.wait_s
            while count < self.max_batch and not stop:
                try:
                    job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                if not self._fits(adapters, job):
                    self._deferred.append(job)
                    continue
                jobs.append(job)
                count += len(job.rows)
                adapters |= self._adapters(job)
            self._run_jobs(jobs)

    @staticmethod
    def _adapters(job: _Job) -> set[str]:
        return {r.adapter for r in job.rows if r.adapter is not None}

    def _fits(self, adapters: set[str], job: _Job) -> bool:
        if self.max_adapters is None:
            return True
        return len(adapters | self._adapters(job)) <= self.max_adapters

    def _run_jobs(self, jobs: list[_Job]) -> None:
        rows = [row for job in jobs for row in job.rows]
        try:
            results = self.backend.generate_rows(rows)
        except Exception as batch_error:
            if len(jobs) == 1:
                self._finish(jobs[0], None, batch_error)
                return
            # One bad job (say an unknown adapter) must not fail the others: run each alone.
            for job in jobs:
                try:
                    self._finish(job, self.backend.generate_rows(job.rows), None)
                except Exception as err:
                    self._finish(job, None, err)
            return
        self.batches += 1
        self.rows += len(rows)
        self.max_rows_seen = max(self.max_rows_seen, len(rows))
        distinct = {r.adapter for r in rows if r.adapter is not None}
        self.max_adapters_seen = max(self.max_adapters_seen, len(distinct))
        start = 0
        for job in jobs:
            self._finish(job, results[start : start + len(job.rows)], None)
            start += len(job.rows)

    @staticmethod
    def _finish(job: _Job, result: list[Completion] | None, error: BaseException | None) -> None:
        job.result, job.error = result, error
        job.done.set()
