"""The batcher's decisions as plain functions, without a running batcher or HTTP: which queued
requests form the next batch under the sentence and token budgets, which ones have expired,
whether a batch is worth waiting for, and what a request costs (its price and Retry-After)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from gmlm.decoding.options import SearchOptions
from gmlm.serve.backends import Prepared
from gmlm.serve.batcher import Batcher, Job, _average, choose_batch, expired, has_room
from gmlm.serve.metrics import Metrics
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend

LOOP = asyncio.new_event_loop()  # only for the jobs' futures; never run


@pytest.fixture(scope="module", autouse=True)
def _close_the_loop():
    yield
    LOOP.close()


def job(name: str, lines: int = 1, tokens: int = 1, seed: int = 0, deadline: float = 100.0):
    prepared = Prepared(
        options=SearchOptions(), seed=seed, tokens=tokens, rows=lines, work=lines * tokens
    )
    made = Job([name] * lines, prepared, deadline, LOOP.create_future(), arrived=0.0)
    made.name = name  # type: ignore[attr-defined]
    return made


def names(batch: list[Job]) -> list[str]:
    return [j.name for j in batch]  # type: ignore[attr-defined]


def test_an_empty_queue_gives_no_batch():
    assert choose_batch([], 4, 10) == []


@pytest.mark.parametrize(
    ("queue", "sentences", "tokens", "want"),
    [
        # the oldest and the later ones of its settings while both budgets hold
        ([("a", 1, 2, 0), ("b", 1, 2, 0), ("c", 1, 2, 0)], 4, 10, ["a", "b", "c"]),
        # other settings (seed) are skipped, not a stop
        ([("a", 2, 2, 1), ("x", 1, 1, 2), ("c", 1, 1, 1)], 4, 10, ["a", "c"]),
        # the sentence budget exactly: 2 + 2 = 4 fits, the next one does not
        ([("a", 2, 1, 0), ("b", 2, 1, 0), ("c", 1, 1, 0)], 4, 10, ["a", "b"]),
        # the token budget exactly: 6 + 4 = 10 fits; 6 + 5 does not
        ([("a", 1, 6, 0), ("b", 1, 4, 0)], 4, 10, ["a", "b"]),
        ([("a", 1, 6, 0), ("b", 1, 5, 0)], 4, 10, ["a"]),
        # a misfit ends the batch: a later one that would fit waits (no overtaking)
        ([("a", 2, 1, 0), ("b", 3, 1, 0), ("c", 1, 1, 0)], 4, 10, ["a"]),
        # the oldest alone over both budgets is a batch of its own, never split
        ([("big", 6, 20, 0), ("b", 1, 1, 0)], 4, 10, ["big"]),
        # the oldest decides the settings, even when its kind is the rarer one
        ([("x", 1, 1, 2), ("a", 1, 1, 1), ("y", 1, 1, 2)], 4, 10, ["x", "y"]),
    ],
)
def test_the_next_batch_under_the_budgets(queue, sentences, tokens, want):
    jobs = [job(n, lines, toks, seed) for n, lines, toks, seed in queue]
    assert names(choose_batch(jobs, sentences, tokens)) == want


def test_choosing_leaves_the_queue_alone():
    jobs = [job("a"), job("b")]
    choose_batch(jobs, 4, 10)
    assert names(jobs) == ["a", "b"]


def test_expired_jobs_are_the_late_and_the_answered():
    late, live, gone, edge = job("late", deadline=5.0), job("live"), job("gone"), job("edge")
    gone.future.cancel()  # its client left
    edge.deadline = 10.0
    assert names(expired([late, live, gone, edge], now=10.0)) == ["late", "gone", "edge"]
    assert expired([live], now=10.0) == []


def test_a_batch_has_room_while_its_kind_queues_fewer_sentences_than_the_budget():
    first, other, same = job("a", lines=2, seed=1), job("x", lines=5, seed=2), job("b", seed=1)
    assert has_room([first, other], first, 3)  # 2 of 3: the other settings do not count
    assert not has_room([first, other, same], first, 3)  # 2 + 1 = 3: full
    assert not has_room([first], first, 2)


def test_a_request_is_priced_at_the_models_recent_rate():
    batcher = Batcher(
        GatedBackend(), ServeSettings(), Metrics(), ThreadPoolExecutor(1), seconds_per_work=0.25
    )
    assert batcher.price_s(job("a", lines=2, tokens=3).prepared) == 1.5  # 6 units x 0.25 s
    unknown = Batcher(GatedBackend(), ServeSettings(), Metrics(), ThreadPoolExecutor(1))
    assert unknown.price_s(job("a", lines=2, tokens=3).prepared) == 0.0  # not measured yet
    # Retry-After: the queued sentences at the recent rate, rounded up, at least 1 s
    batcher.queued_sentences, batcher.seconds_per_sentence = 10, 0.35
    assert batcher.retry_after_s() == 4
    batcher.queued_sentences = 0
    assert batcher.retry_after_s() == 1
    # the rate after a batch: a moving average that starts at the first one
    assert _average(0.0, 2.0) == 2.0
    assert _average(1.0, 2.0) == pytest.approx(1.2)
