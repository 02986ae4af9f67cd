"""Request ids and the service's log: a valid X-Request-ID comes back as sent, an absent or
invalid one is replaced by a generated one, every answer carries one (errors included), each
request gets one log line with its id, model, lines, queue and decode ms and status, in text or
as JSON lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import threading
import time

import httpx
import pytest

from gmlm.serve import logs
from gmlm.serve.middleware import MAX_REQUEST_ID, RequestId, valid_request_id
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend, running

pytestmark = pytest.mark.usefixtures("one_thread")

GENERATED = re.compile(r"[0-9a-f]{32}")


def request_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[logging.LogRecord]:
    """The request log records once there are `count` (the line is written just after the
    answer is sent)."""
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in caplog.records if r.name == "gmlm.serve" and hasattr(r, "fields")]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def logged(caplog: pytest.LogCaptureFixture, request_id: str) -> list[logging.LogRecord]:
    """The log records of the request `request_id`, once there is one."""
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in request_lines(caplog, 0) if r.fields["request_id"] == request_id]  # type: ignore[attr-defined]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def test_valid_request_ids():
    assert valid_request_id(b"abc-123_X.y:z/=") == "abc-123_X.y:z/="
    assert valid_request_id(b"x" * MAX_REQUEST_ID) == "x" * MAX_REQUEST_ID
    for bad in (None, b"", b"x" * (MAX_REQUEST_ID + 1), b"a b", b"a\tb", "é".encode(), b"\x7f"):
        assert valid_request_id(bad) is None, bad


def test_ids_come_back_and_each_request_gets_one_log_line(caplog):
    caplog.set_level(logging.INFO, logger="gmlm.serve")
    settings = ServeSettings(max_body_bytes=100)
    with running(lambda: {"fake": GatedBackend()}, settings) as url:
        caplog.clear()
        body = {"model": "fake", "text": ["a", "b"]}
        ok = httpx.post(url + "/v1/translate", json=body, headers={"X-Request-ID": "req-42"})
        assert ok.status_code == 200 and ok.headers["X-Request-ID"] == "req-42"
        absent = httpx.post(url + "/v1/translate", json={"model": "nope", "text": ["a"]})
        invalid = httpx.post(
            url + "/v1/translate", content=b"x" * 101, headers={"X-Request-ID": "has space"}
        )
        long = httpx.get(url + "/v1/models", headers={"X-Request-ID": "x" * 129})
        missing = httpx.get(url + "/no/such/path")
        assert [absent.status_code, invalid.status_code, long.status_code] == [422, 413, 200]
        assert missing.status_code == 404
        generated = [a.headers["X-Request-ID"] for a in (absent, invalid, long, missing)]
        assert all(GENERATED.fullmatch(g) for g in generated) and len(set(generated)) == 4
        records = request_lines(caplog, 5)
    assert len(records) == 5  # one line per request: the probes of `running` came before
    by_id = {r.fields["request_id"]: r.fields for r in records}  # type: ignore[attr-defined]
    first = by_id["req-42"]
    assert (first["model"], first["lines"], first["status"]) == ("fake", 2, 200)
    assert first["queue_ms"] == ok.json()["timings"]["queue_ms"]
    assert first["decode_ms"] == ok.json()["timings"]["batch_ms"]
    assert first["total_ms"] >= 0
    assert records[0].getMessage() == "POST /v1/translate" and records[0].levelno == logging.INFO
    unknown = by_id[generated[0]]
    assert (unknown["model"], unknown["lines"], unknown["status"]) == ("nope", 1, 422)
    assert unknown["queue_ms"] is None and unknown["decode_ms"] is None
    assert [by_id[g]["status"] for g in generated[1:]] == [413, 200, 404]


def test_probes_are_logged_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="gmlm.serve")
    with running(lambda: {"fake": GatedBackend()}) as url:
        caplog.clear()
        httpx.get(url + "/health", headers={"X-Request-ID": "probe"})
        # (the last /ready probe of `running` may be logged after caplog.clear(): skipped)
        mine = logged(caplog, "probe")
    assert [r.levelno for r in mine] == [logging.DEBUG]


def test_an_unhandled_error_is_a_500_with_the_id():
    async def failing(scope, receive, send):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=RequestId(failing), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/x", headers={"X-Request-ID": "r1"})

    answer = asyncio.run(scenario())
    assert answer.status_code == 500 and answer.text == "Internal Server Error"
    assert answer.headers["X-Request-ID"] == "r1"


@pytest.fixture
def stream():
    """A log stream configured by the test, and the handler taken off afterwards."""
    out = io.StringIO()
    yield out
    for handler in [h for h in logs.ROOT.handlers if isinstance(h, logs.BackgroundHandler)]:
        logs.ROOT.removeHandler(handler)
    logging.captureWarnings(False)


def test_json_lines_parse_and_carry_the_fields(stream):
    logs.configure("json", stream)
    fields = {"request_id": "r1", "model": "padir", "lines": 3, "queue_ms": 1.5, "status": 200}
    logs.LOG.info("POST /v1/translate", extra={"fields": fields})
    logs.LOG.warning("model %s: its worker died", "ct2")
    logs.flush()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert {k: first[k] for k in fields} == fields
    assert (first["level"], first["logger"], first["message"]) == (
        "info",
        "gmlm.serve",
        "POST /v1/translate",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert (second["level"], second["message"]) == ("warning", "model ct2: its worker died")


def test_text_lines_are_readable(stream):
    logs.configure("text", stream)
    logs.LOG.info("listening on %s", "http://127.0.0.1:1")
    logs.LOG.info("GET /v1/models", extra={"fields": {"request_id": "r2", "model": None}})
    logs.LOG.error("replica 7: no model")
    logs.flush()
    assert stream.getvalue().splitlines() == [
        "gmlm serve: listening on http://127.0.0.1:1",
        "gmlm serve: GET /v1/models request_id=r2 model=-",
        "gmlm serve: error: replica 7: no model",
    ]


def test_other_loggers_and_warnings_go_through_the_queue_too(stream, capsys):
    """uvicorn's and asyncio's records and Python warnings reach stderr through the service's
    queue as well: written to an unread stderr pipe from the event loop directly (asyncio's
    "Future exception was never retrieved", say), they would stall every request."""
    import warnings

    logs.configure("text", stream)
    logging.getLogger("asyncio").error("Future exception was never retrieved")
    logging.getLogger("uvicorn.error").error("Exception in ASGI application")
    warnings.warn("a library's warning", UserWarning, stacklevel=1)
    logging.getLogger("some.library").info("below WARNING: not written")
    logs.flush()
    lines = stream.getvalue().splitlines()
    assert lines[:2] == [
        "gmlm serve: error: [asyncio] Future exception was never retrieved",
        "gmlm serve: error: [uvicorn.error] Exception in ASGI application",
    ]
    assert lines[2].startswith("gmlm serve: warning: [py.warnings] ")
    assert "UserWarning: a library's warning" in lines[2]
    assert "below WARNING" not in stream.getvalue()
    assert capsys.readouterr().err == ""


def test_a_stderr_nobody_reads_does_not_block_the_service():
    release = threading.Event()

    class Stuck(io.StringIO):
        def write(self, text: str) -> int:
            release.wait(60)  # a pipe whose reader never reads
            return 0

    handler = logs.BackgroundHandler(Stuck(), capacity=2)
    handler.setFormatter(logs.TextFormatter())
    record = logging.LogRecord("gmlm.serve", logging.INFO, __file__, 1, "x", None, None)
    began = time.monotonic()
    for _ in range(10):
        handler.emit(record)
    handler.flush(timeout=0.05)
    assert time.monotonic() - began < 1
    release.set()
    assert handler.dropped >= 7  # one taken by the writer, two queued, the rest dropped


def test_dropped_log_lines_are_a_metric_that_survives_a_new_handler():
    """gmlm_log_lines_dropped_total counts the lines an unread stderr cost, at each scrape,
    the drops of a handler that configure() replaced included."""
    from prometheus_client import generate_latest

    from gmlm.serve.metrics import Metrics

    def scraped() -> float:
        text = generate_latest(Metrics().registry).decode()
        found = re.search(r"^gmlm_log_lines_dropped_total (\S+)$", text, re.MULTILINE)
        assert found is not None, text
        return float(found.group(1))

    release = threading.Event()

    class Stuck(io.StringIO):
        def write(self, text: str) -> int:
            release.wait(60)
            return 0

    start = scraped()
    assert start == logs.dropped_lines()
    handler = logs.BackgroundHandler(Stuck(), capacity=2)
    handler.setFormatter(logs.TextFormatter())
    logs.ROOT.addHandler(handler)
    try:
        record = logging.LogRecord("gmlm.serve", logging.INFO, __file__, 1, "x", None, None)
        for _ in range(10):
            handler.emit(record)
        assert scraped() == start + handler.dropped and handler.dropped >= 7
        release.set()
        replacement = logs.configure(stream=io.StringIO())
        assert handler not in logs.ROOT.handlers
        assert scraped() == start + handler.dropped
    finally:
        release.set()
        logs.ROOT.removeHandler(handler)
        logs.ROOT.removeHandler(replacement)
        logging.captureWarnings(False)
