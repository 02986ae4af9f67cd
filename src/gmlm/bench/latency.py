"""Translation speed of PaDIR against autoregressive decoding, every system in one run.

    from gmlm.bench import BenchSettings, run_bench

    result = run_bench("runs/ar", "runs/padir", "runs/data", BenchSettings(sentences=50),
                       teacher="runs/teacher", ar1="runs/ar-1layer", json_out="bench.json")

This module runs the benchmark; its parts are the settings (:mod:`gmlm.bench.settings`), the
systems (:mod:`gmlm.bench.systems`), the timing harness (:mod:`gmlm.bench.timing`), the
CTranslate2 workers and their backends (:mod:`gmlm.bench.backends`) and the result's assembly
(:mod:`gmlm.bench.assembly`).

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
backends and of `threads` and 1 thread, compared on a few sentences first: what a user would
pick, since more threads are not always faster there (docs/DESIGN.md section 7). Its times are
taken inside the worker, so the pipe to it is not counted; its systems are interleaved with
the others like any system.

On a GPU the warm-up translates *every* timed sentence once (each way, each system and
precision), whatever ``warmup`` says: the first use of a shape there pays for memory the
caching allocator does not hold yet and for kernel selection, which a few warm-up sentences
leave in the tail (docs/DESIGN.md section 7), so the timed pass measures a warmed-up server.
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

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from gmlm import provenance
from gmlm.bench.assembly import (
    FAIRNESS,
    bench_row,
    bleu_note,
    gpu_name,
    graphs_note,
    length_speedups,
    speedups,
)
from gmlm.bench.backends import BACKEND_PROBE, ctranslate2_info, start_ctranslate2
from gmlm.bench.result import (
    BenchResult,
    BenchRow,
    CheckpointInfo,
    Ctranslate2Info,
    LengthSpeedup,
    Rates,
    SpeedSettings,
)
from gmlm.bench.settings import SWEPT, BenchSettings
from gmlm.bench.systems import System, ctranslate2_systems, load_role, make_systems, padir_note
from gmlm.bench.timing import Clock, measure_latency, measure_throughput, rates
from gmlm.checkpoint.languages import check_dataset
from gmlm.data.binarized import PreparedDataset, load_dataset
from gmlm.data.lengths import encode_inputs
from gmlm.decoding.options import Precision
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores
from gmlm.export.ctranslate2 import COMPUTE_TYPES
from gmlm.export.ctranslate2_worker import Ct2Worker
from gmlm.translation.precision import check_precision
from gmlm.translation.translator import Translator

Log = Callable[[str], None]


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


@dataclass(frozen=True)
class Timed:
    """The sentences timed: `texts[i]` is line `lines[i]` of the split, `ids[role][i]` its
    source ids under each model's tokenizer, `references[i]` its reference; `tick` after each
    sentence or batch, `clock` the time in seconds."""

    texts: list[str]
    lines: list[int]
    ids: dict[str, list[list[int]]]
    references: list[str]
    tick: Callable[[], object]
    clock: Clock


def _measure(
    active: list[System],
    timed: Timed,
    precision: Precision,
    warmup: int,
    batch_sizes: Sequence[int],
    max_tokens: int | None,
    say: Log,
) -> tuple[list[BenchRow], list[LengthSpeedup], str]:
    """Every system of `active` timed at `precision`: its rows, the speed-ups by source length
    and the signature of the BLEU scores."""
    lines, ids = timed.lines, timed.ids
    measured = measure_latency(active, timed.texts, ids, precision, warmup, timed.tick, timed.clock)
    kinds = {system.name: system.kind for system in active}
    grouped = length_speedups(precision, kinds, measured, [len(x) for x in ids["ar"]])
    throughput: dict[int, dict[str, Rates]] = {}
    for size in batch_sizes:
        if size == 1:
            throughput[1] = {
                name: rates(len(times), measured.tokens[name], sum(times))
                for name, times in measured.model.items()
            }
        else:
            say(f"{precision}: throughput at batch size {size}")
            throughput[size] = measure_throughput(
                active, ids, size, max_tokens, precision, timed.tick, timed.clock
            )
    bleu = {
        name: corpus_scores(translations, timed.references)["bleu"]
        for name, translations in measured.translations.items()
    }
    rows = [
        bench_row(s, precision, measured, throughput, bleu[s.name].score, len(lines))
        for s in active
    ]
    return rows, grouped, next(iter(bleu.values())).signature


Role = tuple[str, str | Path, str]


@dataclass(frozen=True)
class Loaded:
    """The checkpoints loaded: `roles` (role, path, kind) in load order, and each role's
    translator and load time in seconds."""

    roles: list[Role]
    translators: dict[str, Translator]
    load_s: dict[str, float]


@dataclass(frozen=True)
class Sentences:
    """The sentences to time, as :class:`Timed` has them, without its tick and clock."""

    texts: list[str]
    lines: list[int]
    ids: dict[str, list[list[int]]]
    references: list[str]


def _checked_options(
    settings: BenchSettings,
    device: str,
    cuda_graphs: bool,
    padir_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Check `settings` (and that they go with `device` and `cuda_graphs`); `padir_options`
    as a dict, checked to name none of the swept settings."""
    settings.validate()
    batch_sizes = settings.batch_sizes
    if cuda_graphs and tuple(batch_sizes) != (1,):
        raise GmlmError(
            f"--cuda-graphs times batch-1 latency only (batch sizes {list(batch_sizes)} would "
            "capture new graphs while timed): pass --batch-sizes 1"
        )
    if settings.ctranslate2 and device != "cpu":
        raise GmlmError(
            f"--ctranslate2 times CTranslate2 on the CPU; with --device {device} the rows "
            "would not compare: use --device cpu, or leave out --ctranslate2"
        )
    options = dict(padir_options or {})
    swept = [name for name in SWEPT if name in options]
    if swept:
        raise GmlmError(
            f"padir_options: {', '.join(swept)} is swept, one system per value: give it as "
            "padir_steps= or length_beams= (--steps, --length-beams)"
        )
    return options


def _load(
    ar: str | Path,
    padir: str | Path,
    optional: Mapping[str, str | Path | None],
    device: str,
    clock: Clock,
    cuda_graphs: bool,
) -> Loaded:
    """Load the `ar` and `padir` checkpoints and those of `optional` (teacher, ar1: AR
    checkpoints, left out where None), each timed."""
    translators: dict[str, Translator] = {}
    load_s: dict[str, float] = {}
    roles: list[Role] = [("ar", ar, "ar"), ("padir", padir, "padir")]
    roles += [(role, path, "ar") for role, path in optional.items() if path is not None]
    for role, path, kind in roles:
        translators[role], load_s[role] = load_role(path, role, kind, device, clock, cuda_graphs)
    return Loaded(roles, translators, load_s)


def _sentences(
    data: str | Path,
    prepared: PreparedDataset,
    texts: list[str],
    settings: BenchSettings,
    translators: dict[str, Translator],
) -> Sentences:
    """The first `settings.sentences` usable lines (see :func:`_inputs`) of `texts`, the
    sources of `settings.split` of the prepared dataset `data`, with their source ids and
    references."""
    split = settings.split
    lines, ids = _inputs(texts, translators, settings.sentences)
    if not lines:
        raise GmlmError(f"{data}: split '{split}' has no sentence every model can take")
    targets = prepared.read_text(split, "tgt")
    return Sentences([texts[i] for i in lines], lines, ids, [targets[i] for i in lines])


def _start_workers(
    converted: dict[str, str | Path],
    settings: BenchSettings,
    ids: dict[str, list[list[int]]],
    translators: dict[str, Translator],
    say: Log,
) -> tuple[list[tuple[str, Ct2Worker]], str]:
    """Convert the checkpoints of `converted` (role -> path) to CTranslate2 and start their
    workers, each probing its backends on the first sentences: the workers and the backend."""
    say(f"converting {', '.join(converted)} to CTranslate2 and starting their workers")
    compute = [p for p in settings.precisions if p in COMPUTE_TYPES]
    probes = {
        role: (ids[role][: BACKEND_PROBE + 1], translators[role].options(beam=5))
        for role in converted
    }
    return start_ctranslate2(converted, settings.threads, compute, probes)


def _time_systems(
    systems: list[System],
    sentences: Sentences,
    settings: BenchSettings,
    warmup: int,
    progress: bool,
    clock: Clock,
    say: Log,
) -> tuple[list[BenchRow], list[LengthSpeedup], str]:
    """Every system timed in every precision of `settings`, after `warmup` sentences: the
    rows, the speed-ups by source length and the signature of the BLEU scores."""
    lines, precisions, batch_sizes = sentences.lines, settings.precisions, settings.batch_sizes
    results: list[BenchRow] = []
    by_length: list[LengthSpeedup] = []
    signature = ""
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
        timed = Timed(
            sentences.texts, lines, sentences.ids, sentences.references, bar.update, clock
        )
        rows, grouped, signature = _measure(
            active, timed, precision, warmup, batch_sizes, settings.max_tokens, say
        )
        results += rows
        by_length += grouped
    bar.close()
    return results, by_length, signature


def _speed_settings(
    settings: BenchSettings,
    loaded: Loaded,
    sentences: Sentences,
    *,
    threads: int,
    device: str,
    cuda_graphs: bool,
    warmup: int,
    ar1: str | Path | None,
    ctranslate2: Ctranslate2Info | str,
    signature: str,
    padir_options: Mapping[str, Any],
) -> SpeedSettings:
    """How the benchmark was run: `threads` the torch threads used, `warmup` the warm-up
    sentences, `ctranslate2` the CTranslate2 note, `signature` the BLEU scores'."""
    translators, lines = loaded.translators, sentences.lines
    return SpeedSettings(
        threads=threads,
        torch=provenance.torch_version(),
        gmlm=provenance.gmlm_version(),
        python=provenance.python_version(),
        cpu=provenance.cpu_model(),
        device=device,
        gpu=gpu_name(device),
        cuda_graphs=graphs_note(cuda_graphs, translators),
        precisions=tuple(settings.precisions),
        split=settings.split,
        sentences=len(lines),
        mean_source_tokens=round(statistics.mean([len(x) for x in sentences.ids["ar"]]), 2),
        warmup=warmup,
        batch_sizes=tuple(settings.batch_sizes),
        max_tokens=settings.max_tokens,
        checkpoints={
            role: CheckpointInfo(
                path=str(path),
                decoder_layers=translators[role].config.n_decoder_layers,
                load_s=round(loaded.load_s[role], 3),
            )
            for role, path, _ in loaded.roles
        },
        ar1="measured" if ar1 is not None else "skipped (no --ar1 given)",
        ctranslate2=ctranslate2,
        fairness=FAIRNESS,
        bleu=bleu_note(settings.split, len(lines), signature),
        padir_decoding=padir_note(translators["padir"].options(**padir_options)),
    )


def run_bench(
    ar: str | Path,
    padir: str | Path,
    data: str | Path,
    settings: BenchSettings | None = None,
    *,
    teacher: str | Path | None = None,
    ar1: str | Path | None = None,
    padir_options: Mapping[str, Any] | None = None,
    device: str = "cpu",
    cuda_graphs: bool = False,
    json_out: str | Path | None = None,
    progress: bool = False,
    log: Log | None = None,
    clock: Clock = time.perf_counter,
) -> BenchResult:
    """Benchmark every system (see the module docstring) as `settings` say (default:
    :class:`BenchSettings`'s defaults), on the first
    `settings.sentences` usable source lines of `settings.split` of the prepared dataset
    `data`; returns the result and, with `json_out`, writes it there as JSON (atomically).
    `progress`: a tqdm bar (stderr); `log` gets a message as each phase starts; `clock` reads
    the time in seconds (tests pass a fake one to check the statistics against known
    durations). `settings.ctranslate2`: add the CTranslate2 rows of `ar` (needs the extra
    ``gmlm[ctranslate2]``). `cuda_graphs`: decoder passes by CUDA graph, warmed up on every
    timed sentence (module docstring). `padir_options`: PaDIR decoding settings (field name
    -> value, as :meth:`Translator.translate` takes them) of every PaDIR system, besides the
    swept `settings.padir_steps` and `settings.length_beams`; default: the checkpoint's."""
    say: Log = log or (lambda _msg: None)
    settings = settings or BenchSettings()
    options = _checked_options(settings, device, cuda_graphs, padir_options)
    prepared = load_dataset(data)
    texts = prepared.read_text(settings.split, "src")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    workers: list[tuple[str, Ct2Worker]] = []
    backend = ""
    try:
        optional = {"teacher": teacher, "ar1": ar1}
        loaded = _load(ar, padir, optional, device, clock, cuda_graphs)
        for role, path, _ in loaded.roles:  # a model of another language pair is an error
            check_dataset(path, loaded.translators[role].languages, prepared)
        sentences = _sentences(data, prepared, texts, settings, loaded.translators)
        systems = make_systems(
            loaded.translators, settings.padir_steps, settings.length_beams, options
        )
        if settings.ctranslate2:
            converted = {"ar": ar, **({"ar1": ar1} if ar1 is not None else {})}
            workers, backend = _start_workers(
                converted, settings, sentences.ids, loaded.translators, say
            )
            for role, worker in workers:
                systems += ctranslate2_systems(role, loaded.translators[role], worker)
        # On a GPU, every shape is met before the timed pass (module docstring).
        warmup = settings.warmup if device == "cpu" else len(sentences.lines)
        results, by_length, signature = _time_systems(
            systems, sentences, settings, warmup, progress, clock, say
        )
        threads_used = provenance.torch_threads()
    finally:
        torch.set_num_threads(previous_threads)
        for _, worker in workers:
            worker.close()
    result = BenchResult(
        settings=_speed_settings(
            settings,
            loaded,
            sentences,
            threads=threads_used,
            device=device,
            cuda_graphs=cuda_graphs,
            warmup=warmup,
            ar1=ar1,
            ctranslate2=ctranslate2_info(settings.ctranslate2, workers, backend),
            signature=signature,
            padir_options=options,
        ),
        systems=tuple(dict.fromkeys(s.name for s in systems)),  # CTranslate2's: 1 per precision
        results=tuple(results),
        speedups=tuple(speedups(results)),
        by_length=tuple(by_length),
    )
    if json_out is not None:
        result.write(Path(json_out))
    return result
