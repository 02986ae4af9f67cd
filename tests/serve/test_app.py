"""The service's HTTP layer on a fake backend: an answer's timings are consistent with the time
the client waited, a streamed body is bounded to the byte, every answer names its process,
and the backends are closed when the service stops."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend, running

pytestmark = pytest.mark.usefixtures("one_thread")


class ClosingBackend(GatedBackend):
    """Records whether the service closed it."""

    closed = False

    def close(self) -> None:
        self.closed = True


def test_timings_lie_within_the_clients_wait_and_answers_name_their_process():
    backend = ClosingBackend()
    with running(lambda: {"fake": backend}) as url:
        began = time.monotonic()
        answer = httpx.post(url + "/v1/translate", json={"model": "fake", "text": ["a", "b"]})
        waited_ms = 1000 * (time.monotonic() - began)
        assert answer.status_code == 200 and answer.json()["translations"] == ["A", "B"]
        timings = answer.json()["timings"]
        assert 0 <= timings["queue_ms"] <= timings["total_ms"] <= waited_ms
        assert 0 <= timings["batch_ms"] <= timings["total_ms"]
        assert (timings["batch_sentences"], timings["batch_requests"]) == (2, 1)
        assert answer.headers["X-Gmlm-Replica"] == str(os.getpid())
        assert httpx.get(url + "/health").headers["X-Gmlm-Replica"] == str(os.getpid())
        assert not backend.closed
    assert backend.closed  # the service stopped: its models were closed


def test_a_streamed_body_is_bounded_to_the_byte():
    settings = ServeSettings(max_body_bytes=200)
    body = b'{"model": "fake", "text": ["a"]}'

    def chunks(size: int):  # no Content-Length: counted as it streams in
        yield body[:10]
        yield b" " * (size - len(body))
        yield body[10:]

    with running(lambda: {"fake": GatedBackend()}, settings) as url:
        headers = {"content-type": "application/json"}
        exact = httpx.post(url + "/v1/translate", content=chunks(200), headers=headers)
        assert exact.status_code == 200 and exact.json()["translations"] == ["A"]
        over = httpx.post(url + "/v1/translate", content=chunks(201), headers=headers)
        assert over.status_code == 413 and "--max-body-bytes" in over.json()["detail"]
