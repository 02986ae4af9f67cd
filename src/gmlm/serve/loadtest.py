"""`gmlm loadtest`: open-loop load on a running `gmlm serve`, the latency a user waits.

For each model and each offered rate (in the order given, so that a low rate after a high one
shows the recovery), requests of `lines` sentences arrive as a Poisson process (exponential gaps,
seeded) for `duration` seconds and are sent at their arrival times whatever the answers do
(open loop: a slow answer cannot hold back the next request, so queueing is measured, not
hidden), and each request's latency runs from its arrival time, not from when the client got
round to sending it. Each request is one POST on a kept-alive connection of a small asyncio
HTTP client (:mod:`gmlm.serve.http_client`, light enough to offer thousands a second);
loopback only; the number of requests and the time are bounded. How late the client itself
woke for its arrivals is measured too (`client_late_ms_p99`): a client that falls behind its
schedule would measure itself.

Per model and rate: the client's latency of answered requests (p50, p90, p99), achieved
throughput (answers per second), errors by status, the service's own decode time (its
`timings.batch_ms`, so the HTTP and queueing overhead is the difference), and from /metrics the
mean queue wait, the mean batch size and the server's resident memory after the rate; a service
that does not answer /metrics around a rate within the client's timeout has stalled, and the
rate counts it among its errors (the run goes on). A GET /health probe every 0.25 s during each
rate gives the slowest answer (how long any request waits on the service), and /metrics the
event loop's wake-ups more than 20 ms late (whether the wait is the loop's own). A model's
capacity is the highest offered rate answered with p99 under `p99_limit_ms` and no errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from gmlm.config import SEED, Range, check_settings
from gmlm.errors import GmlmError
from gmlm.records import OMIT_NONE, Record
from gmlm.serve.http_client import Pool, TransportError
from gmlm.serve.http_client import get as http_get
from gmlm.settings import doc

MAX_REQUESTS = 100_000  # per model and rate, whatever rate x duration says
# The ranges of the load test's settings (checked by run_loadtest and by the flags).
RATE = Range(gt=0, le=10_000, note="requests per second")
DURATION = Range(gt=0, le=3600, note="seconds per rate")
LINES = Range(ge=1, le=4096)
WARMUP = Range(ge=0, le=1000)
TIMEOUT = Range(gt=0, le=3600, note="seconds")
P99_LIMIT = Range(gt=0, le=3_600_000, note="milliseconds")


@dataclass(frozen=True)
class LoadSettings:
    """How `gmlm loadtest` loads each model (each field's help says what; the flags are
    derived from the fields, :mod:`gmlm.cli.options`)."""

    rates: tuple[float, ...] = field(
        default=(1.0, 2.0, 4.0, 8.0),
        metadata=doc("offered requests per second, in this order", range=RATE),
    )
    duration: float = field(default=20.0, metadata=doc("seconds per rate", range=DURATION))
    lines: int = field(default=1, metadata=doc("sentences per request", range=LINES))
    warmup: int = field(
        default=5, metadata=doc("requests per model first, not counted", range=WARMUP)
    )
    timeout_s: float = field(
        default=30.0,
        metadata=doc("client timeout in seconds", flag="--timeout", range=TIMEOUT),
    )
    p99_limit_ms: float = field(
        default=500.0, metadata=doc("the capacity's p99 bound", range=P99_LIMIT)
    )
    seed: int = field(default=0, metadata=doc("seed of the arrival times", range=SEED))

    def validate(self) -> None:
        """Every field within its range, at least one rate, and a bounded number of requests
        at each rate."""
        if not self.rates:
            raise GmlmError("rates: give at least one offered rate")
        check_settings(self)
        for rate in self.rates:
            if rate * self.duration > MAX_REQUESTS:
                raise GmlmError(
                    f"--rates {rate:g} x --duration {self.duration:g} s is more than "
                    f"{MAX_REQUESTS} requests; shorten the duration"
                )


@dataclass(frozen=True, kw_only=True)
class RatePoint(Record):
    """One model at one offered rate."""

    model: str
    offered_rps: float
    sent: int
    ok: int
    errors: dict[str, int]  # status (or transport error) -> count
    achieved_rps: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    refused_p99_ms: float | None  # how fast 503s (queue full) came back
    server_batch_ms_p50: float | None  # the service's decode time of the answered requests
    queue_wait_ms_mean: float | None  # from /metrics, this rate's requests
    batch_sentences_mean: float | None
    resident_mb: float | None  # the server process after this rate
    # Per answered request, its latency less its batch's decode time (batch_ms): all that is
    # not decoding; and the part of it inside the request handler (total_ms - batch_ms:
    # checks, tokenizing, queueing, handing the batch to the decoding thread and back). The
    # rest is HTTP both ways and the client. Medians; absent in files written before them.
    overhead_ms_p50: float | None = field(default=None, metadata=OMIT_NONE)
    handler_overhead_ms_p50: float | None = field(default=None, metadata=OMIT_NONE)
    # CUDA graphs the model captured during this rate (new batch shapes on a GPU) and the ms
    # its batches waited for them; absent where it captures none (a CPU) or in older files.
    graph_captures: int | None = field(default=None, metadata=OMIT_NONE)
    graph_capture_ms: float | None = field(default=None, metadata=OMIT_NONE)
    # The slowest answer to GET /health, sent every PROBE_S during the rate: how long any
    # request waits on the service (absent in older files).
    health_ms_max: float | None = field(default=None, metadata=OMIT_NONE)
    # The service's own event-loop wake-ups during the rate (one every 0.1 s,
    # gmlm_event_loop_lag_seconds) that came more than LATE_WAKEUP_S late: the loop itself
    # held up (absent where the service exports no such metric, or in older files).
    loop_late_wakeups: int | None = field(default=None, metadata=OMIT_NONE)
    # How late the client woke to send its requests, against their arrival times (p99, ms):
    # beyond a few ms the figures are partly the client's own (absent in older files).
    client_late_ms_p99: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class LoadResult(Record):
    url: str
    settings: dict[str, Any]
    points: tuple[RatePoint, ...]
    capacity_rps: dict[str, float | None] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)


def check_loopback(url: str) -> str:
    """`url` without a trailing slash; anything but a loopback address is refused (a load
    test sends traffic only to this machine)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:  # gmlm serve speaks plain HTTP
        raise GmlmError(f"--url {url!r}: expected http://HOST:PORT, e.g. http://127.0.0.1:8080")
    host = parts.hostname
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise GmlmError(
            f"--url {url!r}: a load test only targets this machine (127.0.0.1, ::1 or "
            "localhost); run it beside the service"
        )
    return url.rstrip("/")


def arrivals(rate: float, duration: float, seed: int) -> list[float]:
    """Poisson arrival times in [0, duration) at `rate` per second (exponential gaps)."""
    rng = random.Random(seed)
    times: list[float] = []
    t = rng.expovariate(rate)
    while t < duration and len(times) < MAX_REQUESTS:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between order statistics (numpy's
    default, as the bench's percentiles); None for no values."""
    import numpy as np

    return float(np.percentile(values, q)) if len(values) else None


def scrape(text: str, name: str, model: str | None) -> float | None:
    """One sample of the Prometheus text `text` (read by prometheus_client's parser): `name`
    labelled with `model` (or unlabelled: None)."""
    labels = {} if model is None else {"model": model}
    for sample in _samples(text, name):
        if sample.labels == labels:
            return float(sample.value)
    return None


def _samples(text: str, name: str) -> Iterator[Any]:
    """The samples named `name` in the Prometheus text `text`."""
    for family in text_string_to_metric_families(text):
        yield from (sample for sample in family.samples if sample.name == name)


def _delta(before: str, after: str, name: str, model: str) -> float | None:
    """How much the counter `name` of `model` grew between two scrapes (None: not exported)."""
    values = [scrape(t, name, model) for t in (before, after)]
    return None if values[1] is None else values[1] - (values[0] or 0.0)


def _delta_mean(before: str, after: str, name: str, model: str) -> float | None:
    sums = [scrape(t, f"{name}_sum", model) or 0.0 for t in (before, after)]
    counts = [scrape(t, f"{name}_count", model) or 0.0 for t in (before, after)]
    n = counts[1] - counts[0]
    return (sums[1] - sums[0]) / n if n > 0 else None


# The last lines of a spawned service's stderr kept for an error message.
STDERR_LINES = 50
# The errors key of a rate after which (or before which) the service did not answer GET
# /metrics within the client's timeout: a service that stalls has not held that rate.
METRICS_UNANSWERED = "/metrics unanswered"
# Likewise for a GET /health probe sent during the rate; and how often a probe is sent.
HEALTH_UNANSWERED = "/health unanswered"
PROBE_S = 0.25
# A wake-up of the service's event loop later than this counts as late (a bucket bound of
# gmlm.serve.metrics.LATENCY_BUCKETS).
LATE_WAKEUP_S = 0.02


async def _metrics(client: Pool) -> str:
    """The service's Prometheus text, or "" when it does not answer within the client's
    timeout (or the connection fails)."""
    try:
        answer = await client.get("/metrics")
    except TransportError:
        return ""
    return str(answer.text) if answer.status_code == 200 else ""


async def _one_rate(
    client: Pool,
    model: str,
    rate: float,
    settings: dict[str, Any],
    texts: Sequence[str],
) -> RatePoint:
    times = arrivals(rate, settings["duration"], settings["seed"])
    lines = settings["lines"]
    latencies: list[float] = []
    refusals: list[float] = []
    server_ms: list[float] = []
    overhead: list[float] = []
    in_handler: list[float] = []
    late: list[float] = []
    errors: Counter[str] = Counter()
    before = await _metrics(client)

    async def send(i: int, at: float) -> None:
        arrival = start + at
        delay = arrival - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        late.append(1000.0 * max(time.monotonic() - arrival, 0.0))
        body = {
            "model": model,
            "text": [texts[(i * lines + j) % len(texts)] for j in range(lines)],
            "options": settings["options"].get(model, {}),
        }
        try:
            answer = await client.post("/v1/translate", body)
        except TransportError as err:  # a timeout included: kind "timeout"
            errors[err.kind] += 1
            return
        elapsed = 1000.0 * (time.monotonic() - arrival)
        if answer.status_code == 200:
            latencies.append(elapsed)
            timings = answer.json()["timings"]
            server_ms.append(float(timings["batch_ms"]))
            overhead.append(elapsed - float(timings["batch_ms"]))
            in_handler.append(float(timings["total_ms"]) - float(timings["batch_ms"]))
        else:
            errors[str(answer.status_code)] += 1
            if answer.status_code == 503:
                refusals.append(elapsed)

    probes: list[float] = []

    async def probe() -> None:
        # A connection of its own: the probe measures the service, never a wait for one of
        # the load's connections.
        async with Pool(client.base, client.timeout_s, connections=1) as own:
            while time.monotonic() - start < settings["duration"]:
                sent = time.monotonic()
                try:
                    await own.get("/health")
                except TransportError:
                    errors[HEALTH_UNANSWERED] += 1
                    return
                probes.append(1000.0 * (time.monotonic() - sent))
                await asyncio.sleep(PROBE_S)

    start = time.monotonic()
    await asyncio.gather(probe(), *(send(i, at) for i, at in enumerate(times)))
    span = max(time.monotonic() - start, 1e-9)
    after = await _metrics(client)
    if not (before and after):  # the rate's server-side figures are then unknown
        errors[METRICS_UNANSWERED] += 1
        before = after = ""
    wait = _delta_mean(before, after, "gmlm_queue_wait_seconds", model)
    captures = _delta(before, after, "gmlm_cuda_graph_captures_total", model)
    capture_s = _delta(before, after, "gmlm_cuda_graph_capture_seconds_total", model)
    resident = scrape(after, "process_resident_memory_bytes", None)
    return RatePoint(
        model=model,
        offered_rps=rate,
        sent=len(times),
        ok=len(latencies),
        errors=dict(sorted(errors.items())),
        achieved_rps=len(latencies) / span,
        p50_ms=percentile(latencies, 50),
        p90_ms=percentile(latencies, 90),
        p99_ms=percentile(latencies, 99),
        refused_p99_ms=percentile(refusals, 99),
        server_batch_ms_p50=percentile(server_ms, 50),
        overhead_ms_p50=percentile(overhead, 50),
        handler_overhead_ms_p50=percentile(in_handler, 50),
        queue_wait_ms_mean=None if wait is None else 1000.0 * wait,
        batch_sentences_mean=_delta_mean(before, after, "gmlm_batch_sentences", model),
        resident_mb=None if resident is None else resident / 2**20,
        graph_captures=None if captures is None else round(captures),
        graph_capture_ms=None if capture_s is None else 1000.0 * capture_s,
        health_ms_max=max(probes) if probes else None,
        loop_late_wakeups=_late_wakeups(before, after),
        client_late_ms_p99=percentile(late, 99),
    )


def _late_wakeups(before: str, after: str) -> int | None:
    """The event-loop wake-ups between two scrapes later than LATE_WAKEUP_S (None: not
    exported)."""
    late = [_late(text) for text in (before, after)]
    first, last = late
    return None if first is None or last is None else round(last - first)


def _late(text: str) -> float | None:
    """The event-loop wake-ups later than LATE_WAKEUP_S in one scrape: all of them less those
    of the histogram bucket bounded by it (None: not exported)."""
    lag = "gmlm_event_loop_lag_seconds"
    total = scrape(text, f"{lag}_count", None)
    prompt = [
        float(s.value)
        for s in _samples(text, f"{lag}_bucket")
        if float(s.labels.get("le", "nan")) == LATE_WAKEUP_S
    ]
    return None if total is None or not prompt else total - prompt[0]


def capacity(points: Sequence[RatePoint], model: str, p99_limit_ms: float) -> float | None:
    """The highest offered rate at which `model` answered everything with p99 under the limit."""
    good = [
        p.offered_rps
        for p in points
        if p.model == model and not p.errors and p.p99_ms is not None and p.p99_ms < p99_limit_ms
    ]
    return max(good) if good else None


def run_loadtest(
    url: str,
    models: Sequence[str],
    texts: Sequence[str],
    settings: LoadSettings | None = None,
    *,
    options: dict[str, dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> LoadResult:
    """Load every model in turn at every rate as `settings` say (default: LoadSettings's
    defaults; see the module docstring); `options`: each model's decoding settings by model
    name (default: the model's own)."""
    from gmlm import provenance

    base = check_loopback(url)
    if not texts or not all(t.strip() for t in texts):
        raise GmlmError("--input: give at least one non-empty sentence (no empty lines)")
    settings = settings or LoadSettings()
    settings.validate()
    rates, duration, lines = settings.rates, settings.duration, settings.lines
    warmup, timeout_s, seed = settings.warmup, settings.timeout_s, settings.seed
    per_model = {model: dict((options or {}).get(model, {})) for model in models}
    recorded: dict[str, Any] = {
        "duration": duration,
        "lines": lines,
        "options": per_model,
        "warmup": warmup,
        "timeout_s": timeout_s,
        "p99_limit_ms": settings.p99_limit_ms,
        "seed": seed,
        "rates": list(rates),
        "models": list(models),
    }

    async def main() -> list[RatePoint]:
        async with Pool(base, timeout_s) as client:
            try:
                ready = await client.get("/ready")
                listed = await client.get("/v1/models")
            except TransportError as err:
                raise GmlmError(
                    f"--url {base}: no service answers ({err}); start gmlm serve"
                ) from None
            if ready.status_code != 200:
                raise GmlmError(
                    f"{base}/ready answers {ready.status_code}: the models are not ready"
                )
            served = {m["name"] for m in listed.json()["models"]}
            unknown = [m for m in models if m not in served]
            if unknown:
                raise GmlmError(
                    f"--model {', '.join(unknown)}: not served; served: {', '.join(sorted(served))}"
                )
            points = []
            for model in models:
                for i in range(warmup):
                    body = {
                        "model": model,
                        "text": [texts[i % len(texts)]],
                        "options": per_model[model],
                    }
                    try:
                        answer = await client.post("/v1/translate", body)
                    except TransportError as err:
                        raise GmlmError(
                            f"warm-up request to {model}: no answer within --timeout "
                            f"{timeout_s:g} s ({err.kind}); raise --timeout, or "
                            "send lighter settings"
                        ) from None
                    if answer.status_code != 200:
                        raise GmlmError(
                            f"warm-up request to {model}: {answer.status_code} {answer.text}"
                        )
                for rate in rates:
                    point = await _one_rate(client, model, rate, recorded, texts)
                    log(describe(point))
                    points.append(point)
            return points

    points = asyncio.run(main())
    return LoadResult(
        url=base,
        settings=recorded,
        points=tuple(points),
        capacity_rps={m: capacity(points, m, settings.p99_limit_ms) for m in models},
        provenance={
            "gmlm": provenance.gmlm_version(),
            "python": provenance.python_version(),
            "cpu": provenance.cpu_model(),
            "logical_cpus": provenance.logical_cpus(),
            "host": provenance.host(),
            "git_commit": provenance.git_commit(),
        },
    )


@contextlib.contextmanager
def spawned_service(arguments: Sequence[str], ready_timeout_s: float = 600.0) -> Iterator[str]:
    """Run `gmlm serve ARGUMENTS --port 0` in a process of its own until the block ends, then
    stop it with SIGTERM (every accepted request answered); yields its URL once /ready."""
    command = [sys.executable, "-m", "gmlm", "serve", *arguments, "--port", "0"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        found = re.search(r"listening on (\S+)", first)
        if found is None:
            rest = process.stderr.read()
            raise GmlmError(
                f"gmlm serve {' '.join(arguments)} did not start: {first}{rest}".strip()
            )
        url = found.group(1)
        # Read all along: a pipe nobody reads fills (64 KB of log lines), and whatever the
        # service writes to it then waits (the last lines are kept for the error below).
        said: deque[str] = deque(maxlen=STDERR_LINES)
        reader = threading.Thread(
            target=lambda: said.extend(process.stderr or ()), name="serve-stderr", daemon=True
        )
        reader.start()
        deadline = time.monotonic() + ready_timeout_s
        while True:
            with contextlib.suppress(TransportError):
                if http_get(url + "/ready", 10.0).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    process.kill()
                reader.join(timeout=10)
                last = "".join(said).strip()
                raise GmlmError(f"gmlm serve at {url} never became ready: {last}")
            time.sleep(0.2)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def describe(p: RatePoint) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    errors = ", ".join(f"{k}: {v}" for k, v in p.errors.items()) or "none"
    return (
        f"{p.model} at {p.offered_rps:g}/s: {p.ok}/{p.sent} answered ({p.achieved_rps:.2f}/s), "
        f"p50 {ms(p.p50_ms)} ms, p90 {ms(p.p90_ms)}, p99 {ms(p.p99_ms)}; errors {errors}"
        f"{'' if p.refused_p99_ms is None else f' (503s in {ms(p.refused_p99_ms)} ms at p99)'}; "
        f"server decode p50 {ms(p.server_batch_ms_p50)} ms, queue wait {ms(p.queue_wait_ms_mean)} "
        f"ms, batch {ms(p.batch_sentences_mean)} sentences; not decoding (p50 per request) "
        f"{ms(p.overhead_ms_p50)} ms, {ms(p.handler_overhead_ms_p50)} of it in the handler; "
        f"slowest /health {ms(p.health_ms_max)} ms"
        + (
            ""
            if p.loop_late_wakeups is None
            else f", {p.loop_late_wakeups} loop wake-ups over {LATE_WAKEUP_S * 1000:g} ms late"
        )
        + (
            ""
            if p.client_late_ms_p99 is None
            else f"; client late p99 {ms(p.client_late_ms_p99)} ms"
        )
        + (
            ""
            if p.graph_captures is None
            else f"; {p.graph_captures} CUDA graph captures, {ms(p.graph_capture_ms)} ms waited"
        )
    )
