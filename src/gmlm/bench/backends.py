"""CTranslate2 in `gmlm bench`: the AR checkpoints converted to CTranslate2 and a worker
process started for each model and precision, on the fastest of its GEMM backends (Intel MKL
on or off) and thread counts, compared on a few sentences first (what a user would pick; on an
Intel Xeon, MKL's int8 on 2 threads was several times slower than on 1)."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gmlm.bench.result import Ctranslate2Info
from gmlm.export.ctranslate2 import COMPUTE_TYPES, export_ctranslate2
from gmlm.export.ctranslate2_worker import Ct2Worker

CT2_NOTE = (
    "the ar model (and ar1, when timed) converted to CTranslate2, decoded by gmlm's rules "
    "(length limit, GNMT ranking; gmlm.export.ctranslate2), in fp32 and int8 (compute types "
    "float32 and int8; no bf16 rows: CTranslate2 has no bf16 on a CPU), each model and "
    "precision in a worker process of its own, because CTranslate2's OpenMP and torch's "
    "fight over the cores in one process, with at most the torch thread count (see its "
    "backend line); timed inside the worker (the pipe is not counted)"
)
BACKEND_PROBE = 5
"""Sentences (beam 5, after one untimed) on which each CTranslate2 worker's settings (GEMM
backend, thread count) are compared before timing starts (see :func:`fastest_backend`)."""


def start_ctranslate2(
    models: dict[str, str | Path],
    threads: int,
    precisions: Sequence[str],
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
                    worker, choice = fastest_backend(folder, threads, precision, *probes[role])
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


def fastest_backend(
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


def ctranslate2_info(
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
