"""The timing harness of `gmlm bench`: batch-1 latency per sentence and throughput per batch
size of a list of systems, interleaved so that slow drifts and background load hit all alike
(the fairness rules: :mod:`gmlm.bench.latency`), with the garbage collector off while timing.
A CTranslate2 system is timed inside its worker process (the pipe is not counted)."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gmlm.bench.result import Percentiles, Rates
from gmlm.bench.systems import System
from gmlm.decoding.options import Precision
from gmlm.decoding.refinement import PaddingStats
from gmlm.translation.lines import EmptyTranslationsWarning

Clock = Callable[[], float]


def percentiles(values: Sequence[float]) -> Percentiles:
    """Median, p90, p99 and mean of `values` (seconds) in milliseconds, rounded to 0.001."""
    array = np.asarray(values, dtype=np.float64) * 1000.0
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return Percentiles(
        p50_ms=round(float(p50), 3),
        p90_ms=round(float(p90), 3),
        p99_ms=round(float(p99), 3),
        mean_ms=round(float(array.mean()), 3),
    )


def rotated(systems: list[System], shift: int) -> list[System]:
    shift %= len(systems)
    return systems[shift:] + systems[:shift]


@dataclass(frozen=True)
class Latencies:
    """What the batch-1 pass of one precision measured, by system name: seconds per sentence
    (model-only and end-to-end), output tokens in all, and the end-to-end translations."""

    model: dict[str, list[float]]
    e2e: dict[str, list[float]]
    tokens: dict[str, int]
    translations: dict[str, list[str]]


def measure_latency(
    systems: list[System],
    texts: list[str],
    ids: dict[str, list[list[int]]],
    precision: Precision,
    warmup: int,
    tick: Callable[[], object],
    clock: Clock,
) -> Latencies:
    """Per-sentence batch-1 seconds, model-only and end-to-end, output tokens and the
    end-to-end translations; `tick` is called after each sentence of the warm-up (its first
    `warmup` sentences) and of the timed pass. PaDIR's initial tokens are keyed by a
    sentence's own ids, so both ways and the throughput batches decode the same thing."""
    model: dict[str, list[float]] = {s.name: [] for s in systems}
    e2e: dict[str, list[float]] = {s.name: [] for s in systems}
    translations: dict[str, list[str]] = {s.name: [] for s in systems}
    tokens = dict.fromkeys(model, 0)
    for i in range(min(warmup, len(texts))):
        for system in systems:
            if system.worker is not None:
                system.worker.time([ids[system.model][i]], texts[i], system.options)
                continue
            system.translator.translate_ids(
                [ids[system.model][i]], system.options, precision=precision
            )
            _translate_text(system, texts[i], precision)
        tick()
    with garbage_collector_off():
        for i, text in enumerate(texts):
            for system in rotated(systems, i):
                source = [ids[system.model][i]]
                if system.worker is not None:  # timed inside the worker
                    timing = system.worker.time(source, text, system.options)
                    model[system.name].append(timing.model_s)
                    e2e[system.name].append(timing.e2e_s or 0.0)
                    tokens[system.name] += len(timing.outputs[0])
                    translations[system.name].append(timing.translation or "")
                    continue
                start = clock()
                out = system.translator.translate_ids(source, system.options, precision=precision)
                model[system.name].append(clock() - start)
                tokens[system.name] += len(out[0])
                start = clock()
                translation = _translate_text(system, text, precision)
                e2e[system.name].append(clock() - start)
                translations[system.name].append(translation[0])
            tick()
    return Latencies(model, e2e, tokens, translations)


def _translate_text(system: System, text: str, precision: Precision) -> list[str]:
    # One sentence at a time: an empty output is the row's BLEU's business, not a warning
    # per sentence.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyTranslationsWarning)
        return system.translator.translate([text], system.options, precision=precision)


@contextlib.contextmanager
def garbage_collector_off() -> Iterator[None]:
    """A timed pass: the garbage collector collects first and then stays off until it ends,
    so that no collection lands inside a timing."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def measure_throughput(
    systems: list[System],
    ids: dict[str, list[list[int]]],
    batch_size: int,
    max_tokens: int | None,
    precision: Precision,
    tick: Callable[[], object],
    clock: Clock,
) -> dict[str, Rates]:
    """Sentences/s and output tokens/s of each system over all sentences in batches of
    `batch_size` (longest sources first), interleaved batch by batch, each decoded in
    decoder batches of `max_tokens` padded tokens at most (None: whole); `tick` after each.
    PaDIR's rates carry the padded share of its passes."""
    count = len(next(iter(ids.values())))
    order = sorted(range(count), key=lambda i: -len(ids["padir"][i]))
    seconds = {s.name: 0.0 for s in systems}
    tokens = {s.name: 0 for s in systems}
    padding = {s.name: PaddingStats() for s in systems if s.kind == "padir"}
    with garbage_collector_off():
        for j, start_row in enumerate(range(0, count, batch_size)):
            rows = order[start_row : start_row + batch_size]
            for system in rotated(systems, j):
                batch = [ids[system.model][i] for i in rows]
                if system.worker is not None:  # timed inside the worker
                    timing = system.worker.time(batch, None, system.options)
                    seconds[system.name] += timing.model_s
                    tokens[system.name] += sum(len(o) for o in timing.outputs)
                    continue
                counted = system.translator.padding
                before = counted.computed, counted.content
                start = clock()
                out = system.translator.translate_ids(
                    batch,
                    system.options,
                    batch_size=batch_size,
                    max_tokens=max_tokens,
                    precision=precision,
                )
                seconds[system.name] += clock() - start
                tokens[system.name] += sum(len(o) for o in out)
                if system.name in padding:  # what this batch's passes added
                    padding[system.name].computed += counted.computed - before[0]
                    padding[system.name].content += counted.content - before[1]
            tick()
    return {name: rates(count, tokens[name], seconds[name], padding.get(name)) for name in seconds}


def rates(
    sentences: int, tokens: int, seconds: float, padding: PaddingStats | None = None
) -> Rates:
    return Rates(
        sentences_per_s=round(sentences / seconds, 3),
        tokens_per_s=round(tokens / seconds, 2),
        padded_share=None if padding is None else round(padding.padded_share, 4),
    )
