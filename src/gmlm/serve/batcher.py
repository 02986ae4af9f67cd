"""Dynamic batching: one bounded queue per model, one decoding at a time off the event loop.

A request is checked and priced (sentences, source tokens) before it is queued; a queue that
would pass `max_queue_sentences` refuses it at once (:class:`QueueFull`, answered 503). The
batcher of a model takes the oldest waiting request, waits at most `max_wait_ms` from its
arrival for more requests with the same decoding settings and seed (only those can share a
decoding), up to `max_batch_sentences` and `max_batch_tokens`, and hands the batch to the
model's decoding thread. Each model has a thread of its own, so that a long batch of one model
never holds another model's requests (on a CPU two decodings at once share the cores).

A request is priced by its work (:func:`gmlm.decoding.options.decode_work`: decoder
row-positions over its passes or steps); :meth:`Batcher.price_s` turns that into seconds at the
rate of the model's recent batches (first measured by the warm-up), so a request that cannot
finish within its deadline is refused before it is queued. A request that passes its deadline
while queued, or whose client has gone, leaves the queue without costing any decoding; one
whose batch is running is answered 504 (or 499) at once, and once every request of a running
batch is answered so, or the service is stopping, the batch stops at its next pass, step or
sub-batch (:mod:`gmlm.decoding.cancel`). A failing batch fails its own requests only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from gmlm.decoding.cancel import Cancelled, cancellable
from gmlm.serve.backends import Backend, Prepared, joined
from gmlm.serve.metrics import Metrics
from gmlm.serve.settings import ServeSettings


class QueueFull(Exception):
    """The model's queue has no room for the request (503)."""


class DeadlinePassed(Exception):
    """The request's deadline passed before its translation was ready (504)."""


class Stopping(Exception):
    """The service stopped while the request waited (503)."""


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
    abandoned: bool = False  # answered otherwise (504, 499) while its batch ran

    def let_go(self) -> None:
        """Nobody waits for this job any more (its request was answered 504 or 499): a running
        batch stops once none of its jobs is waited for, and whatever it sets later is dropped
        (an exception set on a future nobody awaits is logged by asyncio when the future is
        collected: "Future exception was never retrieved", one traceback per request)."""
        self.abandoned = True
        if not self.future.done():
            self.future.cancel()
        elif not self.future.cancelled():
            self.future.exception()  # marks it retrieved

    def waited_for(self) -> bool:
        """Whether anyone still waits for this job's result (read by the decoding thread)."""
        return not self.abandoned and time.monotonic() < self.deadline

    @property
    def sentences(self) -> int:
        return len(self.texts)


class Batcher:
    """The queue and batching loop of one model (start it with :meth:`run` as a task)."""

    def __init__(
        self,
        backend: Backend,
        settings: ServeSettings,
        metrics: Metrics,
        executor: Executor,
        seconds_per_work: float = 0.0,
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
        # seconds per unit of Prepared.work: a moving average over recent batches, starting
        # from the warm-up's measurement (0: not known yet, nothing is refused by price)
        self.seconds_per_work = seconds_per_work
        self.stopping = False  # set when the service stops: running batches stop early

    def price_s(self, prepared: Prepared) -> float:
        """Seconds a request of `prepared.work` takes alone at the recent rate (0: unknown)."""
        return prepared.work * self.seconds_per_work

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
        return has_room(self.queue, first, self.settings.max_batch_sentences)

    def _take(self) -> list[Job]:
        """The next batch (:func:`choose_batch`), off the queue, after the jobs whose deadline
        passed or whose client left have left it (those still waited for answered 504)."""
        for job in expired(self.queue, time.monotonic()):
            self.withdraw(job)
            if not job.future.done():
                job.future.set_exception(DeadlinePassed())
        batch = choose_batch(
            self.queue, self.settings.max_batch_sentences, self.settings.max_batch_tokens
        )
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

        def unwanted() -> bool:  # on the decoding thread, between passes, steps and batches
            return self.stopping or not any(job.waited_for() for job in batch)

        try:
            outputs = await loop.run_in_executor(
                self.executor, self._translate, texts, joined([j.prepared for j in batch]), unwanted
            )
        except Cancelled:
            self.metrics.cancelled.labels(name).inc()
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(Stopping() if self.stopping else DeadlinePassed())
            return
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
        self.seconds_per_sentence = _average(self.seconds_per_sentence, seconds / len(texts))
        work = sum(job.prepared.work for job in batch)
        if work:
            self.seconds_per_work = _average(self.seconds_per_work, seconds / work)
        at = 0
        for job in batch:
            mine = outputs[at : at + job.sentences]
            at += job.sentences
            if not job.future.done():
                job.future.set_result(
                    Answer(mine, start - job.arrived, seconds, len(texts), len(batch))
                )

    def _translate(
        self, texts: Sequence[str], prepared: Prepared, unwanted: Callable[[], bool]
    ) -> list[str]:
        with cancellable(unwanted):
            return self.backend.translate(texts, prepared)


def expired(queue: Iterable[Job], now: float) -> list[Job]:
    """The queued jobs nobody waits for any more: past their deadline, or answered (their
    client left)."""
    return [job for job in queue if job.deadline <= now or job.future.done()]


def has_room(queue: Iterable[Job], first: Job, max_sentences: int) -> bool:
    """Whether the queued jobs with `first`'s settings (it among them) leave room for more
    sentences in its batch: worth waiting for more requests."""
    sentences = sum(j.sentences for j in queue if j.prepared.key == first.prepared.key)
    return sentences < max_sentences


def choose_batch(queue: Sequence[Job], max_sentences: int, max_tokens: int) -> list[Job]:
    """The next batch from `queue` (oldest first): the oldest job, then, in order, the later
    jobs with its settings (only those can share a decoding) while the batch stays within
    `max_sentences` and `max_tokens` (source tokens). The first one with its settings that
    does not fit ends the batch: it and those after it wait, so that no request is overtaken
    by a later one of its kind. The oldest job is taken even when it is alone over a budget (a
    request is never split)."""
    if not queue:
        return []
    key = queue[0].prepared.key
    batch: list[Job] = []
    sentences = tokens = 0
    for job in queue:
        if job.prepared.key != key:
            continue
        fits = (
            sentences + job.sentences <= max_sentences
            and tokens + job.prepared.tokens <= max_tokens
        )
        if batch and not fits:
            break
        batch.append(job)
        sentences += job.sentences
        tokens += job.prepared.tokens
    return batch


def _average(previous: float, value: float) -> float:
    """A moving average that starts at the first value (previous 0: none yet)."""
    return value if not previous else 0.8 * previous + 0.2 * value
