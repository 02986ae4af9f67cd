"""No single request stalls the service: requests priced by their work and refused when they
cannot finish in time, running batches stopped once nobody waits for them, each model on a
thread of its own, and a shutdown that does not wait for abandoned work.

The backend here "decodes" in passes of a few milliseconds, calling the decoders' cancellation
checkpoint between them as PaDIR's passes and AR's steps do; a request's option "passes" sets
how many (its price: one unit of work per pass and line)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from gmlm.decoding.cancel import Cancelled, checkpoint
from gmlm.decoding.options import SearchOptions
from gmlm.serve.backends import Prepared
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import running

PASS_S = 0.005


class PassesBackend:
    """Decodes in `passes` passes of PASS_S seconds each (default 1), cancellable between
    them; records how each batch ended."""

    kind = "fake"
    device = "cpu"
    source = "memory"
    languages = None
    rescored_by: str | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.ended: list[str] = []
        self.lock = threading.Lock()

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared:
        passes = int(settings.get("passes", 1))
        return Prepared(SearchOptions(max_length=passes), seed, len(texts), len(texts),
                        passes * len(texts))  # fmt: skip

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]:
        passes = prepared.options.max_length or 1  # type: ignore[union-attr]
        try:
            for _ in range(passes):
                checkpoint()
                time.sleep(PASS_S)
        except Cancelled:
            with self.lock:
                self.ended.append("cancelled")
            raise
        with self.lock:
            self.ended.append("done")
        return [t.upper() for t in texts]

    def close(self) -> None:
        pass


def post(url: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    return httpx.post(url + "/v1/translate", json=body, timeout=timeout)


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(answer=fn(*args)))
    thread.start()
    return thread, out


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def backends() -> dict[str, PassesBackend]:
    return {"a": PassesBackend("a"), "b": PassesBackend("b")}


def test_a_request_that_cannot_finish_in_time_is_refused_up_front() -> None:
    models = backends()
    # The warm-up measured 0.01 s per unit of work for model a (none for b: unknown, so b
    # refuses nothing by price).
    warm = {"a": 0.01}
    settings = ServeSettings(timeout_s=5)
    with running(lambda: models, settings, warmup=lambda _: warm) as url:
        refused = post(url, {"model": "a", "text": ["x", "y"], "options": {"passes": 300}})
        assert refused.status_code == 422
        assert "about 6.0 s" in refused.json()["detail"] and "deadline of 5 s" in refused.text
        assert models["a"].ended == []  # never decoded
        # A shorter deadline of the request's own prices it lower still.
        quick = {"model": "a", "text": ["x"], "options": {"passes": 20}, "timeout_s": 0.1}
        assert post(url, quick).status_code == 422
        assert post(url, {**quick, "timeout_s": 1}).json()["translations"] == ["X"]
        assert post(url, {"model": "b", "text": ["x"], "options": {"passes": 2}}).status_code == 200


def test_a_batch_nobody_waits_for_stops_and_other_models_go_on() -> None:
    models = backends()
    with running(lambda: models, ServeSettings(timeout_s=30)) as url:
        # Model a's batch would run for 100 s; its request gives up after 0.3 s.
        slow = {"model": "a", "text": ["x"], "options": {"passes": 20_000}, "timeout_s": 0.3}
        thread, out = _in_thread(post, url, slow)
        # Meanwhile model b answers at once: it decodes on a thread of its own.
        time.sleep(0.05)
        started = time.monotonic()
        light = post(url, {"model": "b", "text": ["y"], "options": {"passes": 2}})
        assert light.json()["translations"] == ["Y"]
        assert time.monotonic() - started < 5  # not the 100 s of a's batch
        thread.join(timeout=30)
        assert out["answer"].status_code == 504
        # a's batch stopped at its next pass once its only request was answered 504 ...
        _wait_for(lambda: models["a"].ended == ["cancelled"])
        # ... and a answers again at once.
        assert post(url, {"model": "a", "text": ["z"]}).json()["translations"] == ["Z"]
        metrics = httpx.get(url + "/metrics").text
        assert 'gmlm_batches_cancelled_total{model="a"} 1.0' in metrics


def test_a_batch_runs_on_while_one_of_its_requests_still_waits() -> None:
    models = backends()
    settings = ServeSettings(timeout_s=30, max_wait_ms=300)
    with running(lambda: models, settings) as url:
        body = {"model": "a", "options": {"passes": 100}}  # 0.5 s
        impatient = _in_thread(post, url, {**body, "text": ["x"], "timeout_s": 0.35})
        patient = _in_thread(post, url, {**body, "text": ["y"]})
        for thread, _ in (impatient, patient):
            thread.join(timeout=30)
        assert impatient[1]["answer"].status_code == 504
        answer = patient[1]["answer"].json()
        assert answer["translations"] == ["Y"] and answer["timings"]["batch_requests"] == 2
        assert models["a"].ended == ["done"]


def test_stopping_the_service_does_not_wait_for_abandoned_work() -> None:
    """A shutdown under a 100 s batch ends once its request's deadline (2 s) has passed: the
    batch stops at its next pass instead of running to its end."""
    models = backends()
    with running(lambda: models, ServeSettings(timeout_s=2)) as url:
        body = {"model": "a", "text": ["x"], "options": {"passes": 20_000}}
        thread, out = _in_thread(post, url, body)
        _wait_for(lambda: _started(url))
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 15  # the deadline and a pass, not 100 s
    assert models["a"].ended == ["cancelled"]
    thread.join(timeout=30)
    assert out["answer"].status_code == 504


def _started(url: str) -> bool:
    text = httpx.get(url + "/metrics").text
    return 'gmlm_batch_sentences_count{model="a"} 1.0' in text
