"""The inference server's batching executor: per ``model_id`` a queue and a batcher task, and
the one executor thread that runs model loads (and forward passes off the loop).

Each served ``model_id`` has a queue of request frames and a batcher task that flushes when the
queued rows reach ``max_batch``, when every connection that uses the model has a frame queued
(nothing more can arrive before a reply goes out), or when the oldest frame has waited
``max_wait_us``. The queue keeps one lane per connection and forms a batch round-robin over the
lanes (one frame from each connection in turn), so a client with a thousand frames queued delays
another client's request by at most one frame per connection ahead of it, never by its whole
backlog. A flush concatenates whole frames (a frame is never split; a frame larger than
``max_batch`` is one batch) and runs the forward pass *and* reply encoding, one batch at a time
(so forward passes of several models on one device never overlap): on a CPU device on the loop's
own thread, between socket reads (a hand-off to a thread and back cost more server CPU than the
IO it would overlap), on an accelerator on one executor thread, so the loop keeps reading and
writing while the device works (``ServerSettings.forward_on``).

A model swap (``LOAD_MODEL``, SIGHUP) loads on the same executor thread, between batches when
forward passes run there too; the next batch uses the new weights.

:class:`BatchingExecutor` is the half of :class:`~leaguezero.az.inference.server.InferenceServer`
that forms batches and runs them; the server's other half reads the connections, checks each
request and queues it (see :mod:`~leaguezero.az.inference.server` for the bounds both keep).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from leaguezero.az.inference.connection import Connection
from leaguezero.az.inference.lanes import FairQueue, Pending
from leaguezero.az.inference.metrics import ServerMetrics
from leaguezero.az.inference.protocol import Status
from leaguezero.az.inference.replies import forward_and_encode
from leaguezero.az.inference.server_settings import ModelLoader, ServedModel, ServerSettings

log = logging.getLogger("leaguezero.az.inference.server")  # the server's log, as before

LOAD_FAILED_MESSAGE = (
    "cannot load that checkpoint: it is missing, unreadable or not a compatible checkpoint "
    "(the server log says which)"
)


class BatchingExecutor:
    """Batches queued requests and runs them, and loads models, on the executor (a base of
    :class:`~leaguezero.az.inference.server.InferenceServer`, whose ``__init__`` sets the state
    below and which answers errors and keeps the memory budget: ``_error``,
    ``_enforce_budget``)."""

    models: dict[int, ServedModel]
    settings: ServerSettings
    loader: ModelLoader | None
    metrics: ServerMetrics
    device: torch.device
    _executor: ThreadPoolExecutor  # loads, and forward passes unless they run on the loop
    _forward_on_loop: bool
    _queues: dict[int, FairQueue]
    _tasks: list[asyncio.Task]  # one batcher per model_id
    _control_tasks: set[asyncio.Task]

    def _unread_blocks(self, conn: Connection) -> bool:
        """Whether ``conn`` gets no compute now: its unread replies pass ``max_unsent_bytes``.
        A task then waits for it to read (the write buffer drains to half) and wakes the
        batchers."""
        if not conn.over_unread(self.settings.max_unsent_bytes):
            return False
        if not conn.watching:
            conn.watching = True
            task = asyncio.create_task(self._wake_when_read(conn))
            self._control_tasks.add(task)
            task.add_done_callback(self._control_tasks.discard)
        return True

    async def _wake_when_read(self, conn: Connection) -> None:
        try:
            await conn.writer.drain()  # returns when the buffer is below its low-water mark
        except ConnectionError:
            pass  # closed: its frames were dropped
        finally:
            conn.watching = False
            for queue in self._queues.values():
                queue.wake.set()

    def _ensure_queue(self, model_id: int) -> None:
        if model_id not in self._queues:
            self._queues[model_id] = FairQueue()
            self._tasks.append(asyncio.create_task(self._batcher(model_id)))

    async def _batcher(self, model_id: int) -> None:
        queue = self._queues[model_id]
        max_batch, max_wait = self.settings.max_batch, self.settings.max_wait_us * 1e-6
        blocked = self._unread_blocks
        while True:
            if not queue.ready(blocked):  # nothing queued, or only for clients that do not read
                queue.wake.clear()
                await queue.wake.wait()
                continue
            # Rows of one forward pass: at most max_batch and what the memory budget allows for
            # this model (read each time: a model may be swapped for a bigger one).
            per_row = self.models[model_id].bytes_per_row
            max_batch = max(
                1, min(self.settings.max_batch, self.settings.max_forward_bytes // per_row)
            )
            eager = self.settings.eager_flush and queue.all_clients_waiting()
            if queue.rows < max_batch and not eager:
                delay = queue.oldest_arrival(blocked) + max_wait - time.perf_counter()
                if delay > 0:
                    queue.wake.clear()  # woken early by new frames: re-check the row count
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(queue.wake.wait(), delay)
                    continue
            batch, rows = queue.take_batch(max_batch, blocked)
            for p in batch:
                p.conn.queued_bytes -= p.nbytes
            self.metrics.queue_rows.labels(str(model_id)).set(queue.rows)
            await self._flush(model_id, batch, rows)
            self._enforce_budget()  # the replies now sit in the connections' write buffers

    async def _flush(self, model_id: int, batch: list[Pending], rows: int) -> None:
        served = self.models[model_id]
        label = str(model_id)
        requests = [p.request for p in batch]
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        value_function = served.value_function if self.device.type == "cpu" else None
        args = (served.model, requests, self.device, value_function, served.positions)
        try:
            if self._forward_on_loop:
                frames = forward_and_encode(*args)
            else:
                frames = await loop.run_in_executor(self._executor, forward_and_encode, *args)
        except Exception as err:  # a model failure answers this batch and keeps serving
            log.exception("forward pass of model %s failed", model_id)
            for p in batch:
                self._error(p.conn, p.request.request_id, Status.INTERNAL, f"forward failed: {err}")
                p.conn.answered()
            return
        done = time.perf_counter()
        self.metrics.forward.labels(label).observe(done - start)
        self.metrics.batch_rows.labels(label).observe(rows)
        self.metrics.evals.labels(label).inc(rows)
        self.metrics.requests.labels(label).inc(len(batch))
        latency = self.metrics.latency.labels(label)
        for p, frame in zip(batch, frames, strict=True):
            if frame is None:  # the model's outputs for this request are not finite
                msg = f"model {model_id} produced NaN or infinite outputs for this request"
                self._error(p.conn, p.request.request_id, Status.NON_FINITE, msg)
            else:
                p.conn.send(frame)
            p.conn.answered()
            latency.observe(done - p.arrival)

    async def _load(self, model_id: int, argument: str) -> str:
        """Load ``argument`` as ``model_id`` off the loop; returns an error message or ""."""
        if self.loader is None:
            return "this server was started without a model loader"
        loop = asyncio.get_running_loop()
        try:
            served = await loop.run_in_executor(self._executor, self._load_on_executor, argument)
        except Exception as err:
            # Only the log names the reason: a reply saying "does not exist" vs "cannot be read"
            # would let any client probe the server's file system.
            log.warning("loading %r as model %s failed: %s", argument, model_id, err)
            return LOAD_FAILED_MESSAGE
        self.models[model_id] = served  # the next batch of this model uses the new weights
        self._ensure_queue(model_id)
        log.info("model %s now serves %s", model_id, served.source)
        return ""

    def _load_on_executor(self, argument: str) -> ServedModel:
        served = self.loader(argument)
        served.model.to(self.device).eval()
        return served
