"""`gmlm loadtest`: arrival times, percentiles, the loopback rule, and a short run against a
real server with a fake model (counts, errors by status, capacity, report and plot)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.serve.load_report import markdown, plot
from gmlm.serve.loadtest import (
    LoadResult,
    LoadSettings,
    RatePoint,
    arrivals,
    capacity,
    check_loopback,
    describe,
    percentile,
    run_loadtest,
    scrape,
)
from gmlm.serve.metrics import Captures
from gmlm.serve.settings import ServeSettings
from tests.helpers.cli import exit_status
from tests.helpers.serving import GatedBackend, running

SHORT = LoadSettings(rates=(1.0,), duration=0.1)


def test_arrivals_are_a_seeded_poisson_process():
    times = arrivals(50.0, 200.0, seed=3)
    assert times == arrivals(50.0, 200.0, seed=3) != arrivals(50.0, 200.0, seed=4)
    assert all(0 <= a < b < 200.0 for a, b in itertools.pairwise(times))
    gaps = np.diff([0.0, *times])
    # 10,000 expected arrivals: count and mean gap within 4 standard deviations; an
    # exponential's standard deviation equals its mean.
    assert abs(len(times) - 10_000) < 4 * 100
    assert abs(gaps.mean() - 0.02) < 4 * 0.02 / 100
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05


def test_percentile_matches_numpy_linear():
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert percentile([], 50) is None


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:8080", "http://example.com", "ftp://127.0.0.1", "https://127.0.0.1:1"]
)
def test_only_loopback_targets(url):
    with pytest.raises(GmlmError, match="--url"):
        check_loopback(url)
    assert check_loopback("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    assert check_loopback("http://[::1]:80") == "http://[::1]:80"


def test_capacity_is_the_highest_clean_rate_under_the_limit():
    def point(rate, p99, errors=None):
        return RatePoint(
            model="m", offered_rps=rate, sent=10, ok=10, errors=errors or {}, achieved_rps=rate,
            p50_ms=p99 / 2, p90_ms=p99, p99_ms=p99, refused_p99_ms=None, server_batch_ms_p50=1.0,
            queue_wait_ms_mean=0.0, batch_sentences_mean=1.0, resident_mb=1.0,
        )  # fmt: skip

    points = [point(1, 100), point(2, 400), point(4, 600), point(8, 300, {"503": 2})]
    assert capacity(points, "m", 500.0) == 2
    assert capacity(points, "m", 50.0) is None


def test_scrape_reads_labelled_and_plain_samples():
    text = 'a_sum{model="x"} 2.5\na_count{model="x"} 5.0\nprocess_resident_memory_bytes 1e6\n'
    assert scrape(text, "a_sum", "x") == 2.5 and scrape(text, "a_sum", "y") is None
    assert scrape(text, "process_resident_memory_bytes", None) == 1e6


def test_a_short_run_against_a_real_server(tmp_path):
    backend = GatedBackend()
    settings = ServeSettings(max_queue_sentences=1, max_batch_sentences=1, max_wait_ms=0)
    with running(lambda: {"fake": backend}, settings) as url:
        settings = LoadSettings(rates=(40.0, 2.0), duration=1.0, warmup=2, p99_limit_ms=5000.0)
        result = run_loadtest(
            url, ["fake"], ["ein Hund", "eine Katze"], settings, log=lambda _line: None
        )
    fast, slow = result.points
    assert (fast.offered_rps, slow.offered_rps) == (40.0, 2.0)
    for p in result.points:
        assert p.sent == len(arrivals(p.offered_rps, 1.0, 0))
        assert p.ok + sum(p.errors.values()) == p.sent
        assert set(p.errors) <= {"503"}
        assert (p.refused_p99_ms is None) == ("503" not in p.errors)
        assert p.resident_mb is not None and p.resident_mb > 10
    assert slow.ok == slow.sent and slow.batch_sentences_mean == 1.0
    # What is not decoding, per request: the handler's share is part of it (each request's
    # handler time is inside its client latency, so the medians keep that order).
    for p in result.points:
        assert p.overhead_ms_p50 is not None and p.handler_overhead_ms_p50 is not None
        assert 0.0 <= p.handler_overhead_ms_p50 <= p.overhead_ms_p50
    # A file written before these two fields reads with them absent.
    old = json.loads(json.dumps(result.to_json()))
    for point in old["points"]:
        del point["overhead_ms_p50"], point["handler_overhead_ms_p50"]
    assert LoadResult.from_json(old).points[0].overhead_ms_p50 is None
    answered = [t for batch in backend.batches for t in batch]
    assert (
        answered.count("ein Hund") + answered.count("eine Katze")
        == sum(p.ok for p in result.points) + 2
    )  # the warm-up
    again = LoadResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    table = markdown(result)
    assert "| fake | 40 |" in table and "Capacity" in table
    assert plot(result, tmp_path / "load.png") == tmp_path / "load.png"


class CapturingBackend(GatedBackend):
    """A fake model that "captures a CUDA graph" with every batch, waiting 10 ms for it."""

    def __init__(self) -> None:
        super().__init__()
        self.captured = 0

    def translate(self, texts, prepared):  # type: ignore[no-untyped-def]
        self.captured += 1
        return super().translate(texts, prepared)

    def graph_captures(self) -> Captures:
        return Captures(self.captured, 0.01 * self.captured)


def test_graph_captures_are_a_metric_and_counted_per_rate():
    settings = ServeSettings(max_batch_sentences=1, max_wait_ms=0)
    with running(
        lambda: {"fake": CapturingBackend(), "plain": GatedBackend("plain")}, settings
    ) as url:
        load = LoadSettings(rates=(20.0, 5.0), duration=0.5, warmup=1, p99_limit_ms=5000.0)
        result = run_loadtest(url, ["fake", "plain"], ["ein Hund"], load, log=lambda _l: None)
        metrics = httpx.get(url + "/metrics").text
    # One batch a request: the captures during a rate are its answered requests.
    for p in result.points:
        if p.model == "fake":
            assert p.graph_captures == p.ok > 0
            assert p.graph_capture_ms == pytest.approx(10.0 * p.ok)
            assert f"{p.ok} CUDA graph captures" in describe(p)
        else:  # a model without graphs exports none
            assert p.graph_captures is None and p.graph_capture_ms is None
            assert "captures" not in describe(p)
    total = sum(p.ok for p in result.points if p.model == "fake") + 1  # the warm-up
    assert f'gmlm_cuda_graph_captures_total{{model="fake"}} {total}.0' in metrics
    assert 'gmlm_cuda_graph_captures_total{model="plain"}' not in metrics
    assert "| fake | 20 |" in markdown(result)


def test_refuses_unknown_models_and_bad_settings():
    backend = GatedBackend()
    with running(lambda: {"fake": backend}) as url:
        with pytest.raises(GmlmError, match="--model nope: not served; served: fake"):
            run_loadtest(url, ["nope"], ["a"], SHORT, log=lambda _l: None)
        with pytest.raises(GmlmError, match=r"rates\[0\]=0 must be in \(0, 10000\]"):
            run_loadtest(url, ["fake"], ["a"], LoadSettings(rates=(0.0,)), log=lambda _l: None)
        with pytest.raises(GmlmError, match="more than 100000 requests"):
            many = LoadSettings(rates=(10_000.0,), duration=100)
            run_loadtest(url, ["fake"], ["a"], many, log=lambda _l: None)
        with pytest.raises(GmlmError, match="no empty lines"):
            run_loadtest(url, ["fake"], ["a", ""], SHORT, log=lambda _l: None)


def test_cli_starts_its_own_service_and_writes_every_output(
    tiny_models, tmp_path, capsys, monkeypatch
):
    """`gmlm loadtest --serve=...` starts a `gmlm serve` process of its own, loads it, stops
    it and writes every output (the command in-process; the service in its own process)."""
    out = tmp_path / "load"
    command = [
        "loadtest", "--rates", "8,2", "--duration", "0.5",
        "--warmup", "1", f"--serve=--threads 1 --model padir={tiny_models['padir']}",
        "--options", 'padir={"steps": 2}', "--output", str(out / "load.json"),
        "--markdown", str(out / "load.md"), "--plot", str(out / "load.png"),
    ]  # fmt: skip
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the service's process inherits it
    assert main(command) == 0
    result = LoadResult.read(out / "load.json")
    assert [p.offered_rps for p in result.points] == [8.0, 2.0]
    assert result.settings["options"] == {"padir": {"steps": 2}}
    assert all(p.ok == p.sent and not p.errors for p in result.points)
    assert (out / "load.png").is_file() and "| padir | 8 |" in (out / "load.md").read_text()
    assert (
        json.loads(capsys.readouterr().out.strip().splitlines()[-1])["capacity_rps"]["padir"] == 8.0
    )
    capsys.readouterr()
    assert exit_status(["loadtest", "--options", "padir=[1]"]) == 2
    assert "expected MODEL=JSON" in capsys.readouterr().err


def test_a_service_that_stops_answering_is_a_failed_rate_or_a_clear_error(monkeypatch):
    """A service that does not answer GET /metrics after a rate within the client's timeout
    has not held that rate: the rate says so among its errors, keeps no server-side figures
    and no capacity, and the run goes on to the next rate (the measurements before it are not
    lost). A warm-up request that gets no answer is an error naming the setting to change."""
    import time

    import gmlm.serve.routes as routes

    calls = itertools.count()
    real = routes.generate_latest

    def stalls_once(registry):  # type: ignore[no-untyped-def]
        if next(calls) == 1:  # the scrape after the first rate
            time.sleep(0.8)  # past the client's 0.5 s (the next scrape may wait on it too)
        return real(registry)

    monkeypatch.setattr(routes, "generate_latest", stalls_once)
    backend = GatedBackend()
    with running(lambda: {"fake": backend}) as url:
        load = LoadSettings(rates=(5.0, 5.0, 5.0), duration=0.4, warmup=0, timeout_s=0.5)
        points = run_loadtest(url, ["fake"], ["ein Hund"], load, log=lambda _l: None).points
        first, last = points[0], points[-1]
        assert first.errors == {"/metrics unanswered": 1}
        assert (first.batch_sentences_mean, first.queue_wait_ms_mean, first.resident_mb) == (
            None,
            None,
            None,
        )
        assert capacity([first], "fake", 5000.0) is None
        assert "/metrics unanswered" not in last.errors and last.resident_mb is not None
        backend.gate.clear()  # the model never answers now
        with pytest.raises(GmlmError, match="warm-up request to fake: no answer within --timeout"):
            warm = dataclasses.replace(SHORT, warmup=1, timeout_s=0.5)
            run_loadtest(url, ["fake"], ["a"], warm, log=lambda _l: None)
        backend.gate.set()


class BlockingBackend(GatedBackend):
    """A fake model whose checks hold the service's event loop 0.3 s a request (`prepare`
    runs on the loop), as any work done there would."""

    def prepare(self, texts, settings, seed):  # type: ignore[no-untyped-def]
        import time

        time.sleep(0.3)
        return super().prepare(texts, settings, seed)


def test_work_on_the_event_loop_shows_in_the_health_probe_and_the_lag_metric():
    """Each request holds the loop 0.3 s and they come about every 0.2 s: the /health probes
    of the rate wait for it, and the service's own lag histogram sees wake-ups late by more
    than 0.15 s (a 0.3 s hold delays a 0.1 s sleep's wake-up by at least 0.2 s). Without the
    hold both are there (how prompt they are then depends on the machine: not asserted)."""
    for backend, held in ((BlockingBackend(), True), (GatedBackend(), False)):
        with running(lambda b=backend: {"fake": b}) as url:
            load = LoadSettings(rates=(5.0,), duration=1.5, warmup=0, p99_limit_ms=5000.0)
            (point,) = run_loadtest(url, ["fake"], ["ein Hund"], load, log=lambda _l: None).points
            metrics = httpx.get(url + "/metrics").text
        late = scrape(metrics, "gmlm_event_loop_lag_seconds_count", None)
        prompt = [
            s.value
            for f in text_string_to_metric_families(metrics)
            for s in f.samples
            if s.name == "gmlm_event_loop_lag_seconds_bucket" and s.labels == {"le": "0.15"}
        ]
        assert late is not None and late > 0 and len(prompt) == 1
        assert point.health_ms_max is not None and point.ok > 0
        assert point.loop_late_wakeups is not None
        if held:
            assert point.loop_late_wakeups >= 1
            assert prompt[0] < late  # some wake-up later than 0.15 s
            assert point.health_ms_max > 100.0
            assert f"slowest /health {point.health_ms_max:.1f} ms" in describe(point)


FAKE_SERVICE = '''#!{python}
"""A stand-in for `gmlm serve` that writes 1 MB to stderr before it answers /ready (a pipe
nobody reads holds 64 KB: the write would block for good)."""
import http.server, socket, sys
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
sys.stderr.write(f"gmlm serve: listening on http://127.0.0.1:{{port}}\\n")
sys.stderr.flush()
for _ in range(10_000):
    sys.stderr.write("gmlm serve: a log line of about one hundred characters, " + "x" * 44 + "\\n")
sys.stderr.flush()

class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        sys.stderr.write("gmlm serve: GET\\n")

http.server.HTTPServer(("127.0.0.1", port), Ready).serve_forever()
'''


def test_the_spawned_service_s_stderr_is_read_all_along(tmp_path, monkeypatch):
    """`gmlm loadtest --serve` reads the service's stderr after its first line too: a service
    that logs more than a pipe holds (1 MB here, before it is ready) would otherwise block on
    its next write, and a load test would measure a stalled service."""
    import stat
    import sys

    from gmlm.serve import loadtest

    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_SERVICE.format(python=sys.executable), encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(loadtest.sys, "executable", str(fake))
    with loadtest.spawned_service([], ready_timeout_s=60) as url:
        assert httpx.get(url + "/ready", timeout=10).status_code == 200


def test_the_ceiling_tool_loads_a_model_that_answers_at_once():
    """tools/serve_ceiling.py (docs/serving.md): its service in a process of its own, loaded
    by run_loadtest; every request answered, the client's lateness measured."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            str(root / "tools" / "serve_ceiling.py"),
            "--rates=20,40",
            "--duration=.5",
            "--http=h11",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| echo |")]
    assert [row.split("|")[2].strip() for row in rows] == ["20", "40"]
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2] == cells[3] and cells[8] == "none"  # sent == answered, no errors
        assert float(cells[-1]) >= 0.0  # client late p99, ms
    assert "Capacity (highest offered rate with p99 under 100 ms" in done.stdout
    assert "echo service: HTTP by H11Protocol" in done.stderr  # --http reached the service
