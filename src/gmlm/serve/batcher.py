"""Dynamic batching: one bounded queue per model, one decoding at a time off the event loop.

A request is checked and priced (sentences, source tokens) before it is queued; a queue that
would pass `max_queue_sentences` refuses it at once (:class:`QueueFull`, answered 503). The
batcher of a model takes the oldest waiting request, waits at most `max_wait_ms` from its
arrival for more requests with the same decoding settings and seed (only those can share a
decoding), up to `max_batch_sentences` and `max_batch_tokens`, and hands the batch to the
decoding thread. Every model's batches run on one thread: on a CPU two decodings at once only
fight over the cores.

A request that passes its deadline while queued, or whose client has gone, leaves the queue
without costing any decoding; one whose batch is running when its deadline passes is answered
504 at once and its result dropped. A failing batch fails its own requests only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from gmlm.serve.backends import Backend, Prepared
from gmlm.serve.metrics import Metrics
from gmlm.serve.settings import ServeSettings


class QueueFull(Exception):
    """The model's queue has no room for the request (503)."""


class DeadlinePassed(Exception):
    """The request's deadline passed before its translation was ready (504)."""


@dataclass(frozen=True)
class Answer:
    """A request's translations, with how long it waited and the batch it was decoded in."""

    translations: list[str]
    queue_s: float
    batch_s: float
    batch_sentences: int
    batch_requests: int


@dataclass(eq=False)
class Job:
    """One request in a queue: its lines, its checked settings, and where its answer goes."""

    texts: Sequence[str]
    prepared: Prepared
    deadline: float  # time.monotonic()
    future: asyncio.Future[Answer]
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None  # when its batch began decoding

    @property
    def sentences(self) -> int:
        return len(self.texts)


class Batcher:
    """The queue and batching loop of one model (start it with :meth:`run` as a task)."""

    def __init__(
        self, backend: Backend, settings: ServeSettings, metrics: Metrics, executor: Executor
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.metrics = metrics
        self.executor = executor
        self.queue: deque[Job] = deque()
        self.queued_sentences = 0
        self.wakeup = asyncio.Event()
        self.running = 0  # requests in the batch being decoded
        self.seconds_per_sentence = 0.0  # a moving average over recent batches

    def submit(self, texts: Sequence[str], prepared: Prepared, timeout_s: float) -> Job:
        """Queue a checked request, or raise QueueFull."""
        if self.queued_sentences + len(texts) > self.settings.max_queue_sentences:
            raise QueueFull
        loop = asyncio.get_running_loop()
        job = Job(texts, prepared, time.monotonic() + timeout_s, loop.create_future())
        self.queue.append(job)
        self._count(len(texts))
        self.wakeup.set()
        return job

    def withdraw(self, job: Job) -> bool:
        """Take a job that has not started off the queue (its client left or its deadline
        passed); False when its batch has already started."""
        if job.started is not None or job not in self.queue:
            return False
        self.queue.remove(job)
        self._count(-job.sentences)
        return True

    def retry_after_s(self) -> int:
        """Whole seconds a refused client should wait: the queue's sentences at the recent
        decoding rate, at least 1."""
        return max(1, math.ceil(self.queued_sentences * self.seconds_per_sentence))

    def _count(self, delta: int) -> None:
        self.queued_sentences += delta
        self.metrics.queue_depth.labels(self.backend.name).set(self.queued_sentences)

    async def run(self) -> None:
        while True:
            while not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
            first = self.queue[0]
            wait = first.arrived + self.settings.max_wait_ms / 1000.0 - time.monotonic()
            if wait > 0 and self._room(first):
                await asyncio.sleep(wait)
            batch = self._take()
            if batch:
                await self._decode(batch)

    def _room(self, first: Job) -> bool:
        """Whether a batch that starts with `first` could still take more."""
        sentences = sum(j.sentences for j in self.queue if j.prepared.key == first.prepared.key)
        return sentences < self.settings.max_batch_sentences

    def _take(self) -> list[Job]:
        """The next batch: the oldest live job and the later ones with its key that fit."""
        now = time.monotonic()
        for job in [j for j in self.queue if j.deadline <= now or j.future.done()]:
            self.withdraw(job)
            if not job.future.done():
                job.future.set_exception(DeadlinePassed())
        if not self.queue:
            return []
        key = self.queue[0].prepared.key
        batch: list[Job] = []
        sentences = tokens = 0
        for job in list(self.queue):
            if job.prepared.key != key:
                continue
            fits = (
                sentences + job.sentences <= self.settings.max_batch_sentences
                and tokens + job.prepared.tokens <= self.settings.max_batch_tokens
            )
            if batch and not fits:
                break
            batch.append(job)
            sentences += job.sentences
            tokens += job.prepared.tokens
        for job in batch:
            self.withdraw(job)
        return batch

    async def _decode(self, batch: list[Job]) -> None:
        start = time.monotonic()
        texts: list[str] = []
        for job in batch:
            job.started = start
            texts.extend(job.texts)
            self.metrics.queue_wait.labels(self.backend.name).observe(start - job.arrived)
        name = self.backend.name
        self.metrics.batch_sentences.labels(name).observe(len(texts))
        self.metrics.batch_requests.labels(name).observe(len(batch))
        self.running = len(batch)
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(
                self.executor, self.backend.translate, texts, batch[0].prepared
            )
        except Exception as err:  # a failing batch fails its own requests only
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        finally:
            self.running = 0
        seconds = time.monotonic() - start
        self.metrics.decode.labels(name).observe(seconds)
        self.metrics.device_busy.labels(self.backend.device).inc(seconds)
        self.metrics.sentences.labels(name).inc(len(texts))
        rate = seconds / len(texts)
        self.seconds_per_sentence = (
            rate
            if not self.seconds_per_sentence
            else (0.8 * self.seconds_per_sentence + 0.2 * rate)
        )
        at = 0
        for job in batch:
            mine = outputs[at : at + job.sentences]
            at += job.sentences
            if not job.future.done():
                job.future.set_result(
                    Answer(mine, start - job.arrived, seconds, len(texts), len(batch))
                )
