"""Data pipeline benchmark: end-to-end preparation time and batch iterator throughput.

Targets: preparing Multi30k including an 8k SentencePiece model in under 60 s on 2 cores,
and at least 1M target tokens/s from the batch iterator.
Iteration is timed per epoch after one warm-up epoch (planning included: it is part of the
cost of an epoch); the median and the range over epochs are reported.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gmlm import provenance
from gmlm.config import SEED
from gmlm.data.batching import BatchIterator
from gmlm.data.binarized import TranslationDataset, load_dataset
from gmlm.data.prepare import DataConfig, prepare_dataset
from gmlm.data.settings import DataBenchSettings
from gmlm.errors import GmlmError

PREPARE_TARGET_S = 60
TOKENS_PER_S_TARGET = 1_000_000


def environment() -> dict[str, Any]:
    return {
        "gmlm": provenance.gmlm_version(),
        "torch": provenance.torch_version(),
        "numpy": provenance.package_version("numpy"),
        "sentencepiece": provenance.package_version("sentencepiece"),
        "python": provenance.python_version(),
        "device": "cpu",
        "cpu_count": provenance.logical_cpus(),
        "torch_threads": provenance.torch_threads(),
    }


def bench_iterator(
    dataset: TranslationDataset, settings: DataBenchSettings, seed: int
) -> dict[str, Any]:
    """Throughput of `BatchIterator` on rank 0 of `settings.world_size`, one warm-up epoch
    first."""
    max_tokens, epochs = settings.max_tokens, settings.epochs
    iterator = BatchIterator(dataset, max_tokens, seed=seed, rank=0, world_size=settings.world_size)
    if len(iterator) == 0:  # nothing to time: an empty benchmark would read as a fast one
        raise GmlmError(
            f"data bench: the {len(dataset):,} pairs of split '{dataset.split}' make no batch "
            f"for {settings.world_size:,} processes (--world-size: each process needs at least "
            "one pair of every batch); lower --world-size or use a larger split"
        )
    for _ in iterator:  # warm-up: page cache, allocator
        pass
    seconds, tgt_tokens, src_tokens, padded_tgt, batches, sentences = [], [], [], [], [], []
    for _ in range(epochs):
        start = time.perf_counter()
        counts = np.zeros(5, dtype=np.int64)
        for batch in iterator:
            counts += (batch.tgt_tokens, batch.src_tokens, batch.tgt.numel(), 1, batch.size)
        seconds.append(time.perf_counter() - start)
        tgt_tokens.append(int(counts[0]))
        src_tokens.append(int(counts[1]))
        padded_tgt.append(int(counts[2]))
        batches.append(int(counts[3]))
        sentences.append(int(counts[4]))
    rates = [t / s for t, s in zip(tgt_tokens, seconds, strict=True)]
    return {
        "split": dataset.split,
        "max_tokens": max_tokens,
        "world_size": settings.world_size,
        "epochs_timed": epochs,
        "batches_per_epoch": batches[0],
        "sentences_per_batch": round(sentences[0] / max(batches[0], 1), 1),
        "tgt_tokens_per_epoch": tgt_tokens[0],
        "tgt_padding_efficiency": round(tgt_tokens[0] / max(padded_tgt[0], 1), 4),
        "epoch_s_median": round(statistics.median(seconds), 4),
        "tgt_tokens_per_s_median": round(statistics.median(rates)),
        "tgt_tokens_per_s_min": round(min(rates)),
        "tgt_tokens_per_s_max": round(max(rates)),
        "src_tokens_per_s_median": round(
            statistics.median(s / t for s, t in zip(src_tokens, seconds, strict=True))
        ),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = ["setting/result                  value"]
    for section in ("environment", "prepare", "iterator"):
        values = report.get(section)
        if not values:
            continue
        lines.append(f"[{section}]")
        for key, value in values.items():
            text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
            lines.append(f"  {key:<30} {text}")
    return "\n".join(lines)


def bench_prepare(cfg: DataConfig, out_dir: Path, *, progress: bool = False) -> dict[str, Any]:
    """Time `prepare_dataset` end to end (reading through writing), always rebuilding."""
    start = time.perf_counter()
    prepare_dataset(cfg, out_dir, force=True, progress=progress)
    wall = time.perf_counter() - start
    stats = load_dataset(out_dir).stats()
    train = stats.splits["train"]
    return {
        "corpus": cfg.corpus,
        "vocab_size": stats.tokenizer.vocab_size,
        "model_type": stats.tokenizer.model_type,
        "threads": cfg.threads or os.cpu_count(),
        "train_pairs_kept": train.kept,
        "train_pairs_dropped": sum(train.dropped.values()),
        **{f"{phase}_s": value for phase, value in stats.seconds.items()},
        "wall_s": round(wall, 3),
        "target_s": PREPARE_TARGET_S,
        "meets_target": wall < PREPARE_TARGET_S,
    }


def run_benchmark(
    settings: DataBenchSettings,
    *,
    dataset_dir: Path | None = None,
    cfg: DataConfig | None = None,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Benchmark an existing dataset, or prepare `cfg` into a temporary folder first; what is
    timed: `settings` (its fields' help says what), `seed` the batch order's."""
    if (dataset_dir is None) == (cfg is None):
        raise GmlmError("data bench: give either a prepared dataset folder or --corpus, not both")
    settings.validate()
    SEED.check(seed, "seed")
    report: dict[str, Any] = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="gmlm-data-bench-") as tmp:
        if cfg is not None:
            dataset_dir = Path(tmp) / "dataset"
            report["prepare"] = bench_prepare(cfg, dataset_dir, progress=progress)
        assert dataset_dir is not None
        dataset = TranslationDataset.open(dataset_dir, settings.split)
        iterator = bench_iterator(dataset, settings, seed)
        iterator["target_tokens_per_s"] = TOKENS_PER_S_TARGET
        iterator["meets_target"] = iterator["tgt_tokens_per_s_median"] >= TOKENS_PER_S_TARGET
        report["iterator"] = iterator
    return report
