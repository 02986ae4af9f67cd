"""The result of `gmlm bench` assembled from what the timing harness measured: a row per
precision and system (:func:`bench_row`), the speed-ups of every PaDIR setting over every AR
system (:func:`speedups`), the same within thirds of the sentences by source length
(:func:`length_speedups`), and the notes on how the numbers were made."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from gmlm.bench.result import (
    GRAPHS_NOTE,
    BenchResult,
    BenchRow,
    LengthGroup,
    LengthSpeedup,
    Rates,
    Speedup,
    speedup,
)
from gmlm.bench.systems import System
from gmlm.bench.timing import Latencies, percentiles
from gmlm.translation.translator import Translator

# The speed-ups by source length: within this many shares of the timed sentences (thirds).
LENGTH_GROUPS = 3
FAIRNESS = (
    "same sentences and one thread count for every torch system (CTranslate2 at most "
    "that many, see its backend line); systems interleaved "
    "sentence by sentence (latency, order rotating by one system per sentence) and batch by "
    "batch (throughput); untimed warm-up per system and precision; garbage collector off "
    "while timing; speed-up = AR statistic / PaDIR statistic from this one run"
)


def bench_row(
    system: System,
    precision: str,
    measured: Latencies,
    throughput: Mapping[int, Mapping[str, Rates]],
    bleu: float,
    sentences: int,
) -> BenchRow:
    """The row of `system` at `precision`: its batch-1 latencies, throughput at each batch
    size and BLEU over the `sentences` timed."""
    settings = system.settings()
    return BenchRow(
        precision=precision,
        system=system.name,
        role=system.model,
        kind=system.kind,
        steps=settings.get("steps"),
        length_beam=settings.get("length_beam"),
        beam=settings.get("beam"),
        model_params=sum(p.numel() for p in system.translator.model.parameters()),
        mean_output_tokens=round(measured.tokens[system.name] / sentences, 2),
        bleu=round(bleu, 2),
        model=percentiles(measured.model[system.name]),
        e2e=percentiles(measured.e2e[system.name]),
        throughput={str(size): rates[system.name] for size, rates in throughput.items()},
    )


def speedups(results: Sequence[BenchRow]) -> list[Speedup]:
    """For each precision, PaDIR setting and AR system: AR / PaDIR of the batch-1 median and
    p99 latency, model-only and end-to-end."""
    rows = []
    for precision in dict.fromkeys(r.precision for r in results):
        mine = [r for r in results if r.precision == precision]
        for padir in (r for r in mine if r.kind == "padir"):
            for ar in (r for r in mine if r.kind == "ar"):
                rows.append(
                    Speedup(
                        precision=precision,
                        padir=padir.system,
                        ar=ar.system,
                        model_p50=speedup(ar.model.p50_ms, padir.model.p50_ms),
                        model_p99=speedup(ar.model.p99_ms, padir.model.p99_ms),
                        e2e_p50=speedup(ar.e2e.p50_ms, padir.e2e.p50_ms),
                        e2e_p99=speedup(ar.e2e.p99_ms, padir.e2e.p99_ms),
                    )
                )
    return rows


def length_groups(source_lengths: Sequence[int], count: int = LENGTH_GROUPS) -> list[list[int]]:
    """The sentence indices in `count` shares of nearly equal size by source length, shortest
    first (equal lengths in index order; fewer shares when there are fewer sentences)."""
    order = sorted(range(len(source_lengths)), key=lambda i: (source_lengths[i], i))
    return [part.tolist() for part in np.array_split(np.array(order), count) if len(part)]


def length_speedups(
    precision: str,
    kinds: Mapping[str, str],
    measured: Latencies,
    source_lengths: Sequence[int],
) -> list[LengthSpeedup]:
    """For each PaDIR and AR system of `kinds` (name -> "padir" or "ar"): AR median / PaDIR
    median of the batch-1 latencies within each share of the sentences by source length
    (:func:`length_groups`), model-only and end-to-end."""
    groups = length_groups(source_lengths)

    def median_ms(times: list[float], group: list[int]) -> float:
        return 1000 * statistics.median(times[i] for i in group)

    def ratios(ar: str, padir: str, group: list[int]) -> LengthGroup:
        model, e2e = measured.model, measured.e2e
        return LengthGroup(
            min_tokens=min(source_lengths[i] for i in group),
            max_tokens=max(source_lengths[i] for i in group),
            sentences=len(group),
            model_p50=speedup(median_ms(model[ar], group), median_ms(model[padir], group)),
            e2e_p50=speedup(median_ms(e2e[ar], group), median_ms(e2e[padir], group)),
        )

    return [
        LengthSpeedup(
            precision=precision,
            padir=padir,
            ar=ar,
            groups=tuple(ratios(ar, padir, group) for group in groups),
        )
        for padir in (name for name, kind in kinds.items() if kind == "padir")
        for ar in (name for name, kind in kinds.items() if kind == "ar")
    ]


def gpu_name(device: str) -> str | None:
    return torch.cuda.get_device_name(torch.device(device)) if device != "cpu" else None


def graphs_note(used: bool, translators: dict[str, Translator]) -> str | None:
    if not used:
        return None
    count = sum(t.cuda_graph_count() for t in translators.values())
    return f"{GRAPHS_NOTE}; {count} graphs captured in all"


def bleu_note(split: str, sentences: int, signature: str) -> str:
    return (
        f"BLEU of each row's end-to-end translations of these {sentences} sentences against "
        f"the references of split '{split}' (sacreBLEU {signature}): a check that the timed "
        "setting translates as well as it should, not the published score of the whole split"
    )


def json_line(result: BenchResult) -> str:
    return json.dumps(result.to_json(), separators=(",", ":"))
