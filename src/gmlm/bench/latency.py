"""Translation speed of PaDIR against autoregressive decoding, every system in one run.

    from gmlm.bench import run_bench

    result = run_bench("runs/ar", "runs/padir", "runs/data", teacher="runs/teacher",
                       ar1="runs/ar-1layer", json_out="bench.json")

Systems: PaDIR with T passes and B predicted lengths (T = 1, 2, 4, 10; B = 1, 5), and each
AR checkpoint (``ar``; optionally ``teacher``, e.g. the AR teacher trained on the raw data
that distilled ``ar``'s data, and ``ar1``, a deep-encoder / 1-layer-decoder model) greedy and
with beam 5, on its key/value cache. For every precision (fp32, bf16 weights, int8 dynamic
quantisation: :mod:`gmlm.translation.precision`):

* batch-1 latency per sentence, median / p90 / p99, two ways: ``model`` (source ids in,
  output ids out: :meth:`Translator.translate_ids`, i.e. the torch work plus building the
  input tensor and reading the outputs back) and ``e2e`` (raw text in, detokenized text out:
  :meth:`Translator.translate`, cleaning and SentencePiece both ways included). Model loading
  is excluded from both and reported once per checkpoint (``load_s``);
* throughput, sentences/s and output tokens/s (no EOS), at each batch size, with PaDIR's
  padded share of its passes' row-positions; batches are the sentences sorted by source
  length, as :meth:`Translator.translate_ids` makes them by count. At
  batch size 1 the throughput is the model-only latency pass summed (not run twice);
* BLEU of each row's end-to-end translations of the timed sentences against the split's
  references (the same sentences for every row: a speed is never reported without the
  quality it buys; those sentences only, not the published score of the whole split).

With ``ctranslate2=True`` the ``ar`` checkpoint (and ``ar1``, when given: the fastest AR a
user could pick is the 1-layer decoder run by CTranslate2) is also converted to CTranslate2
(:mod:`gmlm.export.ctranslate2`) and timed greedy and with beam 5 by gmlm's decoding rules
("ar ct2 greedy", "ar ct2 beam5", "ar1 ct2 ..."), in fp32 and int8 (CTranslate2's compute
types float32 and int8; it has no bf16 on a CPU), each model and precision in a worker
process of its own: CTranslate2's OpenMP and torch's fight over the cores in one process
(see :mod:`gmlm.export.ctranslate2_worker`). Each worker runs on the fastest of its GEMM
backends and of `threads` and 1 thread, compared on a few sentences first (what a user
would pick; on an Intel Xeon, MKL's int8 on 2 threads was several times slower than on 1).
Its times are taken
inside the worker, so the pipe to it is not counted; its systems are interleaved with the
others like any system.

On a GPU the warm-up translates *every* timed sentence once (each way, each system and
precision), whatever ``warmup`` says: the first use of a shape there pays for memory the
caching allocator does not hold yet and for kernel selection (measured on an H100: with 10
warm-up sentences, bf16 PaDIR T=4 B=5's model-only p99 was 513 ms against 52 ms end-to-end
for the same sentences right after), so the timed pass measures a warmed-up server.
``cuda_graphs=True`` (`gmlm bench --device cuda --cuda-graphs`) runs every torch system's
decoder passes by CUDA graph (:mod:`gmlm.decoding.cuda_graphs`), each shape captured during
that warm-up, so the timed pass replays graphs only. Batch size 1 only: larger batches
would meet new shapes while timed.

Fairness: one process (and the CTranslate2 workers), one fixed thread count, the same
sentences for every system. Systems are interleaved: sentence by sentence for latency (each
sentence runs through every system before the next, in an order that rotates by one system
per sentence) and batch by batch for throughput, so slow drifts and background load hit all
systems alike. Every system first translates ``warmup`` sentences untimed in each precision,
and the garbage collector is off while timing. Speed-ups are ratios of the AR system's
statistic to the PaDIR setting's (median over median, p99 over p99), each pair from the same
run; ``by_length`` gives the median ratios again within each third of the sentences by source
length (:func:`length_speedups`): a p99 rests on the two slowest sentences of 200, a third on
about 67, so whether PaDIR's lead grows with the length shows there more steadily.
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gmlm import provenance
from gmlm.bench.result import (
    GRAPHS_NOTE,
    BenchResult,
    BenchRow,
    CheckpointInfo,
    Ctranslate2Info,
    LengthGroup,
    LengthSpeedup,
    Percentiles,
    Rates,
    SpeedSettings,
    Speedup,
    speedup,
)
from gmlm.config import BATCH_SIZE, SENTENCES, THREAD_COUNT, WARMUP
from gmlm.data.binarized import load_dataset
from gmlm.data.lengths import encode_inputs
from gmlm.decoding.options import (
    PRECISIONS,
    DecodingOptions,
    Precision,
    RefinementOptions,
    pruning_text,
)
from gmlm.decoding.refinement import PaddingStats
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores
from gmlm.export.ctranslate2 import COMPUTE_TYPES, export_ctranslate2
from gmlm.export.ctranslate2_worker import Ct2Worker
from gmlm.translation.precision import check_precision
from gmlm.translation.translator import Translator, load

# Time per run: see `gmlm bench --help` (12.5 minutes measured for `make speed`'s 200
# sentences, 8 systems per precision, fp32 and int8, on 2 idle cores).
DEFAULT_SENTENCES = 100
DEFAULT_WARMUP = 5
DEFAULT_BATCH_SIZES = (1, 8, 64)
DEFAULT_STEPS = (1, 2, 4, 10)
DEFAULT_LENGTH_BEAMS = (1, 5)
AR_BEAMS = (1, 5)
# The speed-ups by source length: within this many shares of the timed sentences (thirds).
LENGTH_GROUPS = 3
# The optional AR models come after --ar, in this order, in the systems and tables.
AR_ROLES = ("ar", "teacher", "ar1")
CT2_NOTE = (
    "the ar model (and ar1, when timed) converted to CTranslate2, decoded by gmlm's rules "
    "(length limit, GNMT ranking; gmlm.export.ctranslate2), in fp32 and int8 (compute types "
    "float32 and int8; no bf16 rows: CTranslate2 has no bf16 on a CPU), each model and "
    "precision in a worker process of its own, because CTranslate2's OpenMP and torch's "
    "fight over the cores in one process, with at most the torch thread count (see its "
    "backend line); timed inside the worker (the pipe is not counted)"
)
FAIRNESS = (
    "same sentences and one thread count for every torch system (CTranslate2 at most "
    "that many, see its backend line); systems interleaved "
    "sentence by sentence (latency, order rotating by one system per sentence) and batch by "
    "batch (throughput); untimed warm-up per system and precision; garbage collector off "
    "while timing; speed-up = AR statistic / PaDIR statistic from this one run"
)

Log = Callable[[str], None]
Clock = Callable[[], float]


@dataclass(frozen=True)
class System:
    """One decoding setting of one checkpoint: `name` (e.g. "padir T=4 B=5"), `model` (the
    role: "padir", "ar", "teacher" or "ar1") and its decoding options; `worker`: run by
    CTranslate2 in that worker process instead of by `translator` (the same weights)."""

    name: str
    model: str
    translator: Translator
    options: DecodingOptions
    worker: Ct2Worker | None = None

    @property
    def kind(self) -> str:
        return self.translator.kind

    def settings(self) -> dict[str, Any]:
        """The decoding settings `Translator.translate` takes, as keyword arguments."""
        if isinstance(self.options, RefinementOptions):
            return {"steps": self.options.steps, "length_beam": self.options.length_beam}
        return {"beam": self.options.beam}


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


def _load(
    path: str | Path, role: str, kind: str, device: str, clock: Clock, cuda_graphs: bool = False
) -> tuple[Translator, float]:
    flag = f"--{role}"
    start = clock()
    translator = load(path, device=device, cuda_graphs=cuda_graphs)
    seconds = clock() - start
    if translator.kind != kind:
        expected = "an autoregressive" if kind == "ar" else "a PaDIR"
        raise GmlmError(
            f"{flag} {path}: is a checkpoint of kind '{translator.kind}', but {flag} needs "
            f"{expected} checkpoint (kind '{kind}')"
        )
    return translator, seconds


# The PaDIR settings the bench sweeps, one system per value (steps=, length_beams=); the
# command line's copy is gmlm.cli.bench.SWEPT (kept light: no torch there).
SWEPT = ("steps", "length_beam")


def make_systems(
    translators: dict[str, Translator],
    steps: Sequence[int] = DEFAULT_STEPS,
    length_beams: Sequence[int] = DEFAULT_LENGTH_BEAMS,
    padir_options: Mapping[str, Any] = MappingProxyType({}),
) -> list[System]:
    """PaDIR T x B settings (each with `padir_options`), then greedy and beam 5 of each AR
    model present."""
    systems = []
    padir = translators["padir"]
    for t in steps:
        for b in length_beams:
            options = padir.options(steps=t, length_beam=b, **padir_options)
            systems.append(System(f"padir T={t} B={b}", "padir", padir, options))
    for role in AR_ROLES:
        if role in translators:
            for beam in AR_BEAMS:
                label = "greedy" if beam == 1 else f"beam{beam}"
                options = translators[role].options(beam=beam)
                systems.append(System(f"{role} {label}", role, translators[role], options))
    return systems


def padir_note(options: DecodingOptions) -> str:
    """PaDIR's decoding settings that the system names (T, B) leave out, in words."""
    assert isinstance(options, RefinementOptions)
    return (
        f"pruning {pruning_text(options.prune_after, options.prune_keep)}; length shift "
        f"{options.length_shift}; selection {options.selection}; stutter remasking "
        f"{options.stutter_remask} (repeats of up to {options.stutter_ngram} tokens)"
    )


def ctranslate2_systems(role: str, translator: Translator, worker: Ct2Worker) -> list[System]:
    """Greedy and beam 5 of the AR model `translator` (role "ar" or "ar1"), run by
    CTranslate2 in `worker` (at the worker's precision only)."""
    return [
        System(
            f"{role} ct2 {'greedy' if beam == 1 else f'beam{beam}'}",
            role,
            translator,
            translator.options(beam=beam),
            worker,
        )
        for beam in AR_BEAMS
    ]


def _inputs(
    texts: list[str], translators: dict[str, Translator], count: int
) -> tuple[list[int], dict[str, list[list[int]]]]:
    """The first `count` lines that every model can take (non-empty, within its
    max_source_len), and their source ids under each model's tokenizer."""
    usable = set(range(len(texts)))
    encoded = {}
    for role, translator in translators.items():
        inputs = encode_inputs(
            translator.tokenizer, texts, translator.config.max_source_len, on_over_length="report"
        )
        usable -= set(inputs.over_length)
        usable -= {i for i, ids in enumerate(inputs.ids) if not ids}
        encoded[role] = inputs.ids
    lines = sorted(usable)[:count]
    return lines, {role: [ids[i] for i in lines] for role, ids in encoded.items()}


def _rotated(systems: list[System], shift: int) -> list[System]:
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


def _latency(
    systems: list[System],
    texts: list[str],
    lines: list[int],
    ids: dict[str, list[list[int]]],
    precision: Precision,
    warmup: int,
    tick: Callable[[], object],
    clock: Clock,
) -> Latencies:
    """Per-sentence batch-1 seconds, model-only and end-to-end, output tokens and the
    end-to-end translations; `tick` is called after each sentence of the warm-up (its first
    `warmup` sentences) and of the timed pass. texts[i] is line lines[i] of the split, which
    keys PaDIR's initial tokens, so both ways and the throughput batches decode the same
    thing."""
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
                [ids[system.model][i]], system.options, precision=precision, lines=[lines[i]]
            )
            _translate_text(system, texts[i], lines[i], precision)
        tick()
    gc.collect()
    gc.disable()
    try:
        for i, text in enumerate(texts):
            for system in _rotated(systems, i):
                source = [ids[system.model][i]]
                if system.worker is not None:  # timed inside the worker
                    timing = system.worker.time(source, text, system.options)
                    model[system.name].append(timing.model_s)
                    e2e[system.name].append(timing.e2e_s or 0.0)
                    tokens[system.name] += len(timing.outputs[0])
                    translations[system.name].append(timing.translation or "")
                    continue
                start = clock()
                out = system.translator.translate_ids(
                    source, system.options, precision=precision, lines=[lines[i]]
                )
                model[system.name].append(clock() - start)
                tokens[system.name] += len(out[0])
                start = clock()
                translation = _translate_text(system, text, lines[i], precision)
                e2e[system.name].append(clock() - start)
                translations[system.name].append(translation[0])
            tick()
    finally:
        gc.enable()
    return Latencies(model, e2e, tokens, translations)


def _translate_text(system: System, text: str, line: int, precision: Precision) -> list[str]:
    return system.translator.translate([text], system.options, precision=precision, lines=[line])


def _throughput(
    systems: list[System],
    lines: list[int],
    ids: dict[str, list[list[int]]],
    batch_size: int,
    precision: Precision,
    tick: Callable[[], object],
    clock: Clock,
) -> dict[str, Rates]:
    """Sentences/s and output tokens/s of each system over all sentences (ids[role][i] is
    line lines[i]) in batches of `batch_size` (longest sources first), interleaved batch by
    batch; `tick` after each. PaDIR's rates carry the padded share of its passes."""
    count = len(next(iter(ids.values())))
    order = sorted(range(count), key=lambda i: -len(ids["padir"][i]))
    seconds = {s.name: 0.0 for s in systems}
    tokens = {s.name: 0 for s in systems}
    padding = {s.name: PaddingStats() for s in systems if s.kind == "padir"}
    gc.collect()
    gc.disable()
    try:
        for j, start_row in enumerate(range(0, count, batch_size)):
            rows = order[start_row : start_row + batch_size]
            for system in _rotated(systems, j):
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
                    precision=precision,
                    lines=[lines[i] for i in rows],
                )
                seconds[system.name] += clock() - start
                tokens[system.name] += sum(len(o) for o in out)
                if system.name in padding:  # what this batch's passes added
                    padding[system.name].computed += counted.computed - before[0]
                    padding[system.name].content += counted.content - before[1]
            tick()
    finally:
        gc.enable()
    return {name: _rates(count, tokens[name], seconds[name], padding.get(name)) for name in seconds}


def _rates(
    sentences: int, tokens: int, seconds: float, padding: PaddingStats | None = None
) -> Rates:
    return Rates(
        sentences_per_s=round(sentences / seconds, 3),
        tokens_per_s=round(tokens / seconds, 2),
        padded_share=None if padding is None else round(padding.padded_share, 4),
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


def run_bench(
    ar: str | Path,
    padir: str | Path,
    data: str | Path,
    *,
    teacher: str | Path | None = None,
    ar1: str | Path | None = None,
    split: str = "test",
    sentences: int = DEFAULT_SENTENCES,
    threads: int = 2,
    precisions: Sequence[str] = PRECISIONS,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    warmup: int = DEFAULT_WARMUP,
    steps: Sequence[int] = DEFAULT_STEPS,
    length_beams: Sequence[int] = DEFAULT_LENGTH_BEAMS,
    padir_options: Mapping[str, Any] | None = None,
    device: str = "cpu",
    ctranslate2: bool = False,
    cuda_graphs: bool = False,
    json_out: str | Path | None = None,
    progress: bool = False,
    log: Log | None = None,
    clock: Clock = time.perf_counter,
) -> BenchResult:
    """Benchmark every system (see the module docstring) on the first `sentences` usable
    source lines of `split` of the prepared dataset `data`; returns the result and, with
    `json_out`, writes it there as JSON (atomically). `progress`: a tqdm bar (stderr);
    `log` gets a message as each phase starts; `clock` reads the time in seconds (tests pass
    a fake one to check the statistics against known durations). `ctranslate2`: add the
    CTranslate2 rows of `ar` (needs the extra ``gmlm[ctranslate2]``). `cuda_graphs`: decoder
    passes by CUDA graph, warmed up on every timed sentence (module docstring).
    `padir_options`: PaDIR decoding settings (field name -> value, as
    :meth:`Translator.translate` takes them) of every PaDIR system, besides the swept
    `steps` and `length_beams`; default: the checkpoint's."""
    say: Log = log or (lambda _msg: None)
    _check_settings(sentences, threads, precisions, batch_sizes, warmup)
    if cuda_graphs and tuple(batch_sizes) != (1,):
        raise GmlmError(
            f"--cuda-graphs times batch-1 latency only (batch sizes {list(batch_sizes)} would "
            "capture new graphs while timed): pass --batch-sizes 1"
        )
    if ctranslate2 and device != "cpu":
        raise GmlmError(
            f"--ctranslate2 times CTranslate2 on the CPU; with --device {device} the rows "
            "would not compare: use --device cpu, or leave out --ctranslate2"
        )
    padir_options = dict(padir_options or {})
    swept = [name for name in SWEPT if name in padir_options]
    if swept:
        raise GmlmError(
            f"padir_options: {', '.join(swept)} is swept, one system per value: give it as "
            "steps= or length_beams= (--steps, --length-beams)"
        )
    prepared = load_dataset(data)
    texts = prepared.read_text(split, "src")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    workers: list[tuple[str, Ct2Worker]] = []
    backend = ""
    try:
        translators: dict[str, Translator] = {}
        load_s: dict[str, float] = {}
        roles = [("ar", ar, "ar"), ("padir", padir, "padir")]
        roles += [
            (role, path, "ar")
            for role, path in (("teacher", teacher), ("ar1", ar1))
            if path is not None
        ]
        for role, path, kind in roles:
            translators[role], load_s[role] = _load(path, role, kind, device, clock, cuda_graphs)
        lines, ids = _inputs(texts, translators, sentences)
        if not lines:
            raise GmlmError(f"{data}: split '{split}' has no sentence every model can take")
        chosen = [texts[i] for i in lines]
        targets = prepared.read_text(split, "tgt")
        references = [targets[i] for i in lines]
        systems = make_systems(translators, steps, length_beams, padir_options)
        if ctranslate2:
            converted = {"ar": ar, **({"ar1": ar1} if ar1 is not None else {})}
            say(f"converting {', '.join(converted)} to CTranslate2 and starting their workers")
            timed = [p for p in precisions if p in COMPUTE_TYPES]
            probes = {
                role: (ids[role][: BACKEND_PROBE + 1], translators[role].options(beam=5))
                for role in converted
            }
            workers, backend = _start_ctranslate2(converted, threads, timed, probes)
            for role, worker in workers:
                systems += ctranslate2_systems(role, translators[role], worker)
        results: list[BenchRow] = []
        by_length: list[LengthSpeedup] = []
        source_lengths = [len(x) for x in ids["ar"]]
        if device != "cpu":  # every shape met before the timed pass (module docstring)
            warmup = len(lines)
        per_precision = min(warmup, len(lines)) + len(lines)
        per_precision += sum(-(-len(lines) // size) for size in batch_sizes if size > 1)
        bar = tqdm(
            total=per_precision * len(precisions),
            desc="bench",
            unit="step",
            dynamic_ncols=True,
            disable=not progress,
        )
        for precision in map(check_precision, precisions):
            # A CTranslate2 system runs at its worker's precision only.
            active = [s for s in systems if s.worker is None or s.worker.precision == precision]
            say(f"{precision}: batch-1 latency of {len(active)} systems on {len(lines)} sentences")
            measured = _latency(active, chosen, lines, ids, precision, warmup, bar.update, clock)
            kinds = {system.name: system.kind for system in active}
            by_length += length_speedups(precision, kinds, measured, source_lengths)
            throughput: dict[int, dict[str, Rates]] = {}
            for size in batch_sizes:
                if size == 1:
                    throughput[1] = {
                        name: _rates(len(times), measured.tokens[name], sum(times))
                        for name, times in measured.model.items()
                    }
                else:
                    say(f"{precision}: throughput at batch size {size}")
                    throughput[size] = _throughput(
                        active, lines, ids, size, precision, bar.update, clock
                    )
            bleu = {
                name: corpus_scores(translations, references)["bleu"]
                for name, translations in measured.translations.items()
            }
            for system in active:
                settings = system.settings()
                results.append(
                    BenchRow(
                        precision=precision,
                        system=system.name,
                        role=system.model,
                        kind=system.kind,
                        steps=settings.get("steps"),
                        length_beam=settings.get("length_beam"),
                        beam=settings.get("beam"),
                        model_params=sum(p.numel() for p in system.translator.model.parameters()),
                        mean_output_tokens=round(measured.tokens[system.name] / len(lines), 2),
                        bleu=round(bleu[system.name].score, 2),
                        model=percentiles(measured.model[system.name]),
                        e2e=percentiles(measured.e2e[system.name]),
                        throughput={
                            str(size): throughput[size][system.name] for size in batch_sizes
                        },
                    )
                )
        bar.close()
        threads_used = provenance.torch_threads()
    finally:
        torch.set_num_threads(previous_threads)
        for _, worker in workers:
            worker.close()
    result = BenchResult(
        settings=SpeedSettings(
            threads=threads_used,
            torch=provenance.torch_version(),
            gmlm=provenance.gmlm_version(),
            python=provenance.python_version(),
            cpu=provenance.cpu_model(),
            device=device,
            gpu=_gpu_name(device),
            cuda_graphs=_graphs_note(cuda_graphs, translators),
            precisions=tuple(precisions),
            split=split,
            sentences=len(lines),
            mean_source_tokens=round(statistics.mean(source_lengths), 2),
            warmup=warmup,
            batch_sizes=tuple(batch_sizes),
            checkpoints={
                role: CheckpointInfo(
                    path=str(path),
                    decoder_layers=translators[role].config.n_decoder_layers,
                    load_s=round(load_s[role], 3),
                )
                for role, path, _ in roles
            },
            ar1="measured" if ar1 is not None else "skipped (no --ar1 given)",
            ctranslate2=_ctranslate2_info(ctranslate2, workers, backend),
            fairness=FAIRNESS,
            bleu=_bleu_note(split, len(lines), next(iter(bleu.values())).signature),
            padir_decoding=padir_note(translators["padir"].options(**padir_options)),
        ),
        systems=tuple(dict.fromkeys(s.name for s in systems)),  # CTranslate2's: 1 per precision
        results=tuple(results),
        speedups=tuple(speedups(results)),
        by_length=tuple(by_length),
    )
    if json_out is not None:
        result.write(Path(json_out))
    return result


def _gpu_name(device: str) -> str | None:
    return torch.cuda.get_device_name(torch.device(device)) if device != "cpu" else None


def _graphs_note(used: bool, translators: dict[str, Translator]) -> str | None:
    if not used:
        return None
    count = sum(t.cuda_graph_count() for t in translators.values())
    return f"{GRAPHS_NOTE}; {count} graphs captured in all"


def _bleu_note(split: str, sentences: int, signature: str) -> str:
    return (
        f"BLEU of each row's end-to-end translations of these {sentences} sentences against "
        f"the references of split '{split}' (sacreBLEU {signature}): a check that the timed "
        "setting translates as well as it should, not the published score of the whole split"
    )


BACKEND_PROBE = 5
"""Sentences (beam 5, after one untimed) on which each CTranslate2 worker's settings (GEMM
backend, thread count) are compared before timing starts (see :func:`_fastest_backend`)."""


def _start_ctranslate2(
    models: dict[str, str | Path],
    threads: int,
    precisions: list[str],
    probes: dict[str, tuple[list[list[int]], Any]],
) -> tuple[list[tuple[str, Ct2Worker]], str]:
    """Convert each of `models` (role -> AR checkpoint) into a temporary folder and start a
    worker on it for each precision, on the faster of CTranslate2's GEMM backends for it
    (`probes`: role -> (source ids, beam-5 options) to compare them on): (role, worker) pairs
    and what was chosen, for the settings. A worker has read the whole export once it
    answers, so the folder goes right after."""
    workers: list[tuple[str, Ct2Worker]] = []
    choices: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gmlm-ct2-") as tmp:
        try:
            for role, checkpoint in models.items():
                folder = export_ctranslate2(checkpoint, Path(tmp) / role)
                for precision in precisions:
                    worker, choice = _fastest_backend(folder, threads, precision, *probes[role])
                    workers.append((role, worker))
                    choices.append(f"{role} {precision}: {choice}")
        except BaseException:
            for _, worker in workers:
                worker.close()
            raise
    fewer = f", at {threads} threads and at 1" if threads > 1 else ""
    note = (
        f"CTranslate2's Intel MKL GEMM backend (its default on Intel CPUs) on and off{fewer}, "
        f"each in a worker, compared on {BACKEND_PROBE} beam-5 sentences (median ms, after "
        f"one untimed) and the fastest kept, since neither the default nor all the threads "
        f"is the faster on every CPU (a user would run it as it is fastest): "
        f"{'; '.join(choices)}"
    )
    return workers, note


def _fastest_backend(
    folder: Path, threads: int, precision: str, sources: list[list[int]], options: Any
) -> tuple[Ct2Worker, str]:
    """A worker on `folder` with CTranslate2's MKL backend on or off, on `threads` threads or
    on 1 (when `threads` > 1: with MKL's int8 on 2 threads of an Intel Xeon, one thread was
    several times faster), whichever translated `sources` fastest (interleaved one by one);
    the others are stopped. Also a phrase with every median and the choice."""
    candidates: dict[str, Ct2Worker] = {}
    counts = (threads, 1) if threads > 1 else (threads,)
    try:
        for backend, mkl in (("MKL", True), ("no MKL", False)):
            for count in counts:
                name = backend if len(counts) == 1 else f"{backend} {count}t"
                candidates[name] = Ct2Worker(folder, count, precision, mkl=mkl)
        seconds: dict[str, list[float]] = {name: [] for name in candidates}
        for i, source in enumerate(sources[: BACKEND_PROBE + 1]):
            for name, worker in candidates.items():
                timing = worker.time([source], None, options)
                if i:
                    seconds[name].append(timing.model_s)
        medians = {name: statistics.median(v) if v else 0.0 for name, v in seconds.items()}
        best = min(medians, key=medians.__getitem__)
    except BaseException:
        for worker in candidates.values():
            worker.close()
        raise
    for name, worker in candidates.items():
        if name != best:
            worker.close()
    shown = ", ".join(f"{name} {1000 * s:.1f}" for name, s in medians.items())
    return candidates[best], f"{shown} ms: {best}"


def _ctranslate2_info(
    asked: bool, pairs: list[tuple[str, Ct2Worker]], backend: str
) -> Ctranslate2Info | str:
    if not asked:
        return "skipped (no --ctranslate2 given)"
    if not pairs:
        return f"skipped (none of the precisions timed is one of {', '.join(COMPUTE_TYPES)})"
    workers = [worker for _, worker in pairs]
    return Ctranslate2Info(
        version=workers[0].version,
        load_s=round(max(w.load_s for w in workers), 3),
        note=CT2_NOTE,
        backend=backend,
    )


def _check_settings(
    sentences: int,
    threads: int,
    precisions: Sequence[str],
    batch_sizes: Sequence[int],
    warmup: int,
) -> None:
    SENTENCES.check(sentences, "sentences")
    THREAD_COUNT.check(threads, "threads")
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown or not precisions:
        raise GmlmError(f"precisions {list(precisions)}: choose from {', '.join(PRECISIONS)}")
    if not batch_sizes:
        raise GmlmError("batch sizes: give at least one")
    for i, size in enumerate(batch_sizes):
        BATCH_SIZE.check(size, f"batch_sizes[{i}]")
    WARMUP.check(warmup, "warmup")


def json_line(result: BenchResult) -> str:
    return json.dumps(result.to_json(), separators=(",", ":"))
