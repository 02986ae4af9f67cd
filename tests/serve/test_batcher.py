"""The batcher of one model on its own, without HTTP: the queue bound prices the incoming
request, a batch is the oldest request and the later ones with its settings that fit, expired
work leaves the queue undecoded, and a decoded batch answers each request with its own lines."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gmlm.serve.backends import Prepared
from gmlm.serve.batcher import Batcher, DeadlinePassed, QueueFull, Stopping, _average
from gmlm.serve.metrics import Metrics
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend


def _batcher(**settings: float) -> Batcher:
    return Batcher(GatedBackend(), ServeSettings(**settings), Metrics(), ThreadPoolExecutor(1))  # type: ignore[arg-type]


def _prepared(texts: list[str], seed: int = 0, tokens: int | None = None) -> Prepared:
    prepared = GatedBackend().prepare(texts, {}, seed)
    if tokens is None:
        return prepared
    return Prepared(prepared.options, prepared.seed, tokens, prepared.rows, prepared.work)


def _depth(batcher: Batcher) -> float:
    value = batcher.metrics.registry.get_sample_value("gmlm_queue_sentences", {"model": "fake"})
    assert value is not None
    return value


def test_the_queue_bound_counts_the_incoming_request():
    async def scenario() -> None:
        batcher = _batcher(max_queue_sentences=4, max_batch_sentences=2)
        batcher.submit(["a", "b"], _prepared(["a", "b"]), 30)
        batcher.submit(["c"], _prepared(["c"]), 30)
        assert batcher.queued_sentences == 3
        with pytest.raises(QueueFull):  # 3 + 2 would pass 4
            batcher.submit(["d", "e"], _prepared(["d", "e"]), 30)
        assert batcher.queued_sentences == 3 and len(batcher.queue) == 2
        batcher.submit(["d"], _prepared(["d"]), 30)  # 3 + 1 fills it exactly
        assert batcher.queued_sentences == 4 and _depth(batcher) == 4
        with pytest.raises(QueueFull):
            batcher.submit(["e"], _prepared(["e"]), 30)
        # a request larger than the whole queue is refused even when the queue is empty
        empty = _batcher(max_queue_sentences=2, max_batch_sentences=2)
        with pytest.raises(QueueFull):
            empty.submit(["a", "b", "c"], _prepared(["a", "b", "c"]), 30)
        assert empty.queued_sentences == 0

    asyncio.run(scenario())


def test_a_batch_is_the_oldest_request_and_the_later_ones_of_its_settings_that_fit():
    async def scenario() -> None:
        batcher = _batcher(max_batch_sentences=4, max_batch_tokens=10)
        jobs = [
            batcher.submit(["a", "b"], _prepared(["a", "b"], seed=1), 30),
            batcher.submit(["x"], _prepared(["x"], seed=2), 30),  # other settings: not shared
            batcher.submit(["c"], _prepared(["c"], seed=1), 30),
            batcher.submit(["d", "e"], _prepared(["d", "e"], seed=1), 30),  # 2 + 1 + 2 > 4
            batcher.submit(["f"], _prepared(["f"], seed=1), 30),  # after a misfit: waits
        ]
        assert batcher._take() == [jobs[0], jobs[2]]
        assert batcher.queued_sentences == 4 and list(batcher.queue) == [jobs[1], jobs[3], jobs[4]]
        assert _depth(batcher) == 4
        assert batcher._take() == [jobs[1]]
        assert batcher._take() == [jobs[3], jobs[4]]  # exactly 3 sentences of 4
        assert batcher._take() == [] and batcher.queued_sentences == 0

        # the token bound: 6 + 4 tokens fit 10 exactly, 6 + 5 do not
        tokens = _batcher(max_batch_sentences=4, max_batch_tokens=10)
        six = tokens.submit(["a"], _prepared(["a"], tokens=6), 30)
        four = tokens.submit(["b"], _prepared(["b"], tokens=4), 30)
        assert tokens._take() == [six, four]
        six = tokens.submit(["a"], _prepared(["a"], tokens=6), 30)
        five = tokens.submit(["b"], _prepared(["b"], tokens=5), 30)
        assert tokens._take() == [six]
        # a request past both bounds on its own is never split: it is a batch alone
        big = tokens.submit(list("abcdef"), _prepared(list("abcdef"), tokens=20), 30)
        assert tokens._take() == [five]
        assert tokens._take() == [big]

    asyncio.run(scenario())


def test_expired_and_abandoned_requests_leave_the_queue_undecoded():
    async def scenario() -> None:
        batcher = _batcher(max_batch_sentences=4)
        expired = batcher.submit(["late"], _prepared(["late"]), 0)  # its deadline is now
        gone = batcher.submit(["gone"], _prepared(["gone"]), 30)
        gone.future.cancel()  # its client left
        live = batcher.submit(["ok"], _prepared(["ok"]), 30)
        assert batcher._take() == [live]
        assert isinstance(expired.future.exception(), DeadlinePassed)
        assert batcher.queued_sentences == 0 and _depth(batcher) == 0
        # a job that has started is not withdrawn
        started = batcher.submit(["s"], _prepared(["s"]), 30)
        started.started = 1.0
        assert not batcher.withdraw(started) and batcher.queued_sentences == 1

    asyncio.run(scenario())


def test_each_request_gets_its_own_lines_of_the_batch_and_the_counters_count_sentences():
    async def scenario() -> None:
        batcher = _batcher(max_batch_sentences=4, max_queue_sentences=8)
        backend: GatedBackend = batcher.backend  # type: ignore[assignment]
        backend.gate.clear()  # hold the first batch until the others are queued
        loop_task = asyncio.create_task(batcher.run())
        began = time.monotonic()
        first = batcher.submit(["a"], _prepared(["a"]), 30)
        for _ in range(30_000):  # until its batch has started (at most 30 s)
            if batcher.running:
                break
            await asyncio.sleep(0.001)
        jobs = [
            batcher.submit(["b", "c"], _prepared(["b", "c"]), 30),
            batcher.submit(["d"], _prepared(["d"]), 30),
        ]
        backend.gate.set()
        # a bounded wait: a batcher that never answers fails here instead of hanging
        answers = [await asyncio.wait_for(job.future, 30) for job in (first, *jobs)]
        elapsed = time.monotonic() - began
        loop_task.cancel()
        assert [a.translations for a in answers] == [["A"], ["B", "C"], ["D"]]
        # each wait and batch time lies within the time the whole exchange took
        assert all(0 <= a.queue_s <= elapsed and 0 <= a.batch_s <= elapsed for a in answers)
        assert backend.batches == [["a"], ["b", "c", "d"]]
        assert [(a.batch_sentences, a.batch_requests) for a in answers] == [(1, 1), (3, 2), (3, 2)]
        registry = batcher.metrics.registry
        assert registry.get_sample_value("gmlm_sentences_total", {"model": "fake"}) == 4
        assert registry.get_sample_value("gmlm_batch_requests_sum", {"model": "fake"}) == 3
        assert batcher.seconds_per_sentence > 0 and batcher.retry_after_s() == 1

    asyncio.run(scenario())


class _CancellableBackend(GatedBackend):
    """Holds its batch at the gate, then reaches a cancellation point, as the decoders do."""

    def translate(self, texts, prepared):  # type: ignore[no-untyped-def]
        from gmlm.decoding.cancel import checkpoint

        if not self.gate.wait(timeout=30):
            raise RuntimeError("gate never opened")
        checkpoint()
        return super().translate(texts, prepared)


@pytest.mark.parametrize("how", ["stopping", "abandoned", "wanted"])
def test_a_running_batch_stops_once_nobody_waits_for_it(how):
    async def scenario() -> None:
        backend = _CancellableBackend()
        backend.gate.clear()
        batcher = Batcher(backend, ServeSettings(), Metrics(), ThreadPoolExecutor(1))
        loop_task = asyncio.create_task(batcher.run())
        jobs = [batcher.submit([t], _prepared([t]), 30) for t in ("a", "b")]
        for _ in range(30_000):
            if batcher.running:
                break
            await asyncio.sleep(0.001)
        assert batcher.running == 2  # one batch of both requests, held at the gate
        if how == "stopping":
            batcher.stopping = True
        elif how == "abandoned":
            for job in jobs:
                job.abandoned = True
        else:
            jobs[0].abandoned = True  # the other one still waits: the batch goes on
        backend.gate.set()
        done, _ = await asyncio.wait([job.future for job in jobs], timeout=30)
        loop_task.cancel()
        assert len(done) == 2 and batcher.running == 0
        cancelled = batcher.metrics.registry.get_sample_value(
            "gmlm_batches_cancelled_total", {"model": "fake"}
        )
        if how == "wanted":
            assert cancelled is None or cancelled == 0
            assert [job.future.result().translations for job in jobs] == [["A"], ["B"]]
        else:
            assert cancelled == 1 and backend.batches == []
            error = Stopping if how == "stopping" else DeadlinePassed
            assert all(isinstance(job.future.exception(), error) for job in jobs)

    asyncio.run(scenario())


def test_a_job_is_waited_for_until_its_deadline_or_its_client_leaves():
    async def scenario() -> None:
        batcher = _batcher()
        live = batcher.submit(["a"], _prepared(["a"]), 30)
        assert live.waited_for()
        live.abandoned = True
        assert not live.waited_for()
        late = batcher.submit(["b"], _prepared(["b"]), 0)
        assert not late.waited_for()

    asyncio.run(scenario())


def test_a_batch_with_room_waits_for_more_and_a_full_one_starts_at_once():
    async def scenario() -> None:
        # ten minutes of max_wait_ms, far beyond any of the test's waits
        waiting = _batcher(max_batch_sentences=2, max_wait_ms=600_000)
        loop_task = asyncio.create_task(waiting.run())
        alone = waiting.submit(["a"], _prepared(["a"]), 900)  # room for one more: it waits
        for _ in range(20):
            await asyncio.sleep(0)
        assert waiting.queue[0] is alone and waiting.running == 0 and not alone.future.done()
        loop_task.cancel()

        full = _batcher(max_batch_sentences=2, max_wait_ms=600_000)
        backend: GatedBackend = full.backend  # type: ignore[assignment]
        loop_task = asyncio.create_task(full.run())
        job = full.submit(["a", "b"], _prepared(["a", "b"]), 900)  # no room: it starts at once
        answer = await asyncio.wait_for(job.future, 30)
        loop_task.cancel()
        assert backend.batches == [["a", "b"]] and answer.translations == ["A", "B"]

    asyncio.run(scenario())


def test_a_wait_under_a_second_still_gathers_the_request_that_comes_within_it():
    """max_wait_ms=500: a request 50 ms after the first joins its batch (the wait is counted
    in milliseconds, however short)."""

    async def scenario() -> None:
        batcher = _batcher(max_batch_sentences=4, max_wait_ms=500)
        backend: GatedBackend = batcher.backend  # type: ignore[assignment]
        loop_task = asyncio.create_task(batcher.run())
        first = batcher.submit(["a"], _prepared(["a"]), 30)
        await asyncio.sleep(0.05)
        second = batcher.submit(["b"], _prepared(["b"]), 30)
        answers = await asyncio.wait_for(asyncio.gather(first.future, second.future), 30)
        loop_task.cancel()
        assert backend.batches == [["a", "b"]]
        assert [a.translations for a in answers] == [["A"], ["B"]]

    asyncio.run(scenario())


def test_the_recent_rate_is_a_moving_average_that_starts_at_the_first_batch():
    assert _average(0.0, 2.0) == 2.0
    assert _average(1.0, 2.0) == pytest.approx(1.2)
