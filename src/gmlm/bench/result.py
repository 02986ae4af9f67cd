"""The result of :func:`gmlm.bench.run_bench` (bench.json, the JSON line of `gmlm bench`):
settings with their provenance, one row per precision and system, and the speed-ups."""

from __future__ import annotations

from dataclasses import dataclass, field

from gmlm.records import OMIT_NONE, Record


@dataclass(frozen=True, kw_only=True)
class Percentiles(Record):
    """Latency statistics of per-sentence durations, in milliseconds."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True, kw_only=True)
class Rates(Record):
    """Throughput at one batch size; output tokens exclude EOS. `padded_share`: of a PaDIR
    row, the share of its decoder passes' row-positions that were padding (absent for AR
    rows, at batch size 1 and in files written before the bench measured it)."""

    sentences_per_s: float
    tokens_per_s: float
    padded_share: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo(Record):
    path: str
    decoder_layers: int
    load_s: float


@dataclass(frozen=True, kw_only=True)
class Ctranslate2Info(Record):
    """The CTranslate2 runtime of the "ar ct2" rows: its version, the worker's load time (not
    counted in any latency) and how it was run (`backends.CT2_NOTE`)."""

    version: str
    load_s: float
    note: str
    # Which GEMM backend each worker used and why (absent in files written before the bench
    # chose it): see backends.fastest_backend.
    backend: str | None = field(default=None, metadata=OMIT_NONE)


GRAPHS_NOTE = (
    "every torch system's encoder and decoder passes or steps replayed as CUDA graphs "
    "(gmlm.decoding.cuda_graphs), "
    "each shape captured during the warm-up, which covers every timed sentence on a GPU, so "
    "the timed pass replays graphs only"
)


@dataclass(frozen=True, kw_only=True)
class SpeedSettings(Record):
    """How the numbers were made: provenance (threads .. device) and the benchmark's settings;
    `checkpoints` by role (ar, padir, teacher, ar1); `ar1` says whether --ar1 was measured,
    `ctranslate2` what ran the CTranslate2 rows, or why there are none (absent in files
    written before gmlm bench had them); `bleu` how the rows' BLEU was scored, or why not
    (absent in files written before the rows had one); `gpu`: the GPU's name on a CUDA
    device; `cuda_graphs`: how CUDA graphs ran (both absent when not used); `padir_decoding`:
    PaDIR's settings besides T and B (absent in files written before it was recorded);
    `max_tokens`: the token budget of the throughput rows' decoder batches (absent: none)."""

    threads: int
    torch: str
    gmlm: str
    python: str
    cpu: str
    device: str
    gpu: str | None = field(default=None, metadata=OMIT_NONE)
    cuda_graphs: str | None = field(default=None, metadata=OMIT_NONE)
    precisions: tuple[str, ...]
    split: str
    sentences: int
    mean_source_tokens: float
    warmup: int
    batch_sizes: tuple[int, ...]
    max_tokens: int | None = field(default=None, metadata=OMIT_NONE)
    checkpoints: dict[str, CheckpointInfo]
    ar1: str
    ctranslate2: Ctranslate2Info | str | None = field(default=None, metadata=OMIT_NONE)
    fairness: str
    bleu: str | None = field(default=None, metadata=OMIT_NONE)
    padir_decoding: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class BenchRow(Record):
    """One system in one precision: PaDIR rows carry `steps` and `length_beam`, AR rows `beam`;
    `bleu`: of its end-to-end translations of the timed sentences (None: no references, or a
    file written before rows had it); `throughput` by batch size (as a string, a JSON key)."""

    precision: str
    system: str
    role: str
    kind: str
    steps: int | None = field(default=None, metadata=OMIT_NONE)
    length_beam: int | None = field(default=None, metadata=OMIT_NONE)
    beam: int | None = field(default=None, metadata=OMIT_NONE)
    model_params: int
    mean_output_tokens: float
    bleu: float | None = field(default=None, metadata=OMIT_NONE)
    model: Percentiles
    e2e: Percentiles
    throughput: dict[str, Rates]


def speedup(slow_ms: float, fast_ms: float) -> float:
    """How many times as fast `fast_ms` is as `slow_ms`, to the 3 decimals bench.json holds:
    every speed-up gmlm prints (bench table, report, summary) is this value, so they agree to
    the last digit shown."""
    return round(slow_ms / fast_ms, 3)


@dataclass(frozen=True, kw_only=True)
class Speedup(Record):
    """AR statistic / PaDIR statistic at batch size 1 (> 1: PaDIR is faster)."""

    precision: str
    padir: str
    ar: str
    model_p50: float
    model_p99: float
    e2e_p50: float
    e2e_p99: float


@dataclass(frozen=True, kw_only=True)
class LengthGroup(Record):
    """The speed-ups over one share of the timed sentences by source length: those whose
    source has `min_tokens` .. `max_tokens` tokens (`sentences` of them), AR median / PaDIR
    median of their batch-1 latencies, model-only and end-to-end."""

    min_tokens: int
    max_tokens: int
    sentences: int
    model_p50: float
    e2e_p50: float


@dataclass(frozen=True, kw_only=True)
class LengthSpeedup(Record):
    """A speed-up of :class:`Speedup` within each share of the sentences, shortest first."""

    precision: str
    padir: str
    ar: str
    groups: tuple[LengthGroup, ...]


@dataclass(frozen=True, kw_only=True)
class BenchResult(Record):
    """`by_length`: the speed-ups within shares of the sentences by source length (absent in
    files written before the bench had them)."""

    settings: SpeedSettings
    systems: tuple[str, ...]
    results: tuple[BenchRow, ...]
    speedups: tuple[Speedup, ...]
    by_length: tuple[LengthSpeedup, ...] | None = field(default=None, metadata=OMIT_NONE)
