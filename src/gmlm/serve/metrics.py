"""The service's Prometheus metrics (`GET /metrics`), on a registry of the app's own (two apps
in one process, as the tests start them, do not share counters)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gmlm.serve import logs

# Seconds, from 1 ms to 30 s: batch-1 latencies are tens of milliseconds on a CPU and a few on
# a GPU; queueing under overload reaches the deadline.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# How often the service measures its event loop's lag (seconds; gmlm_event_loop_lag_seconds).
LOOP_PROBE_S = 0.1


class DroppedLogLines(Collector):
    """``gmlm_log_lines_dropped_total``: log lines the process dropped because stderr was not
    read fast enough (:mod:`gmlm.serve.logs`); read at each scrape."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "gmlm_log_lines_dropped",
            "Log lines dropped because stderr was not read fast enough (its queue was full)",
            value=logs.dropped_lines(),
        )


@dataclass(frozen=True)
class Captures:
    """The CUDA graphs a model has captured so far, and the seconds its batches waited for
    the captures (a batch of a new shape captures its graphs first)."""

    graphs: int
    seconds: float


class GraphCaptures(Collector):
    """``gmlm_cuda_graph_captures_total{model}`` and ``gmlm_cuda_graph_capture_seconds_total
    {model}``: the CUDA graphs each model has captured and the seconds its batches waited for
    the captures (a batch of a new shape captures its graphs first), read at each scrape from
    `captures`, by model (:func:`gmlm.serve.backends.graph_captures`; None for a model that
    decodes without graphs, as every model does off a GPU)."""

    def __init__(self, captures: Callable[[], Mapping[str, Captures | None]]) -> None:
        self.captures = captures

    def collect(self) -> Iterator[CounterMetricFamily]:
        help_count = "CUDA graphs captured (each new batch shape on a GPU), by model"
        help_seconds = "Seconds batches waited for CUDA graph captures, by model"
        count = CounterMetricFamily("gmlm_cuda_graph_captures", help_count, labels=["model"])
        seconds = CounterMetricFamily(
            "gmlm_cuda_graph_capture_seconds", help_seconds, labels=["model"]
        )
        for name, found in self.captures().items():
            if found is not None:
                count.add_metric([name], found.graphs)
                seconds.add_metric([name], found.seconds)
        yield count
        yield seconds


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, CPU seconds
        self.registry.register(DroppedLogLines())
        self.requests = Counter(
            "gmlm_requests",
            "Translation requests answered, by model and HTTP status",
            ["model", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gmlm_request_seconds",
            "Time from a translation request's arrival to its answer (successful requests)",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "gmlm_queue_wait_seconds",
            "Time a request waited in its model's queue before its batch started",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decode = Histogram(
            "gmlm_batch_seconds",
            "Time the model took to translate one batch",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_sentences = Histogram(
            "gmlm_batch_sentences",
            "Sentences per decoded batch",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_requests = Histogram(
            "gmlm_batch_requests",
            "Requests per decoded batch",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "gmlm_queue_sentences",
            "Sentences waiting in a model's queue",
            ["model"],
            registry=self.registry,
        )
        self.sentences = Counter(
            "gmlm_sentences",
            "Sentences translated",
            ["model"],
            registry=self.registry,
        )
        self.cancelled = Counter(
            "gmlm_batches_cancelled",
            "Batches stopped before the end because nobody waited for them any more (every "
            "request answered 504 or 499, or the service stopping)",
            ["model"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "gmlm_worker_restarts",
            "Worker processes (CTranslate2 models) the supervisor found dead and restarted (one "
            "that dies during a request is restarted at once and the request answered 503)",
            ["model"],
            registry=self.registry,
        )
        self.flagged_lines = Counter(
            "gmlm_flagged_lines",
            "Request lines the input language check flagged, by model and reason: language "
            "(confidently another language than the model's source language), no_letters or "
            "control (a control character among letters)",
            ["model", "reason"],
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "gmlm_event_loop_lag_seconds",
            f"How late the event loop woke a task that slept {LOOP_PROBE_S:g} s: the time any "
            "request (a translation, /health, /metrics) waits before the service reads it",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.device_busy = Counter(
            "gmlm_device_busy_seconds",
            "Seconds the device spent decoding batches (its rate over a window is the share of "
            "the time the device was busy: every model's batches run on one decode thread)",
            ["device"],
            registry=self.registry,
        )
