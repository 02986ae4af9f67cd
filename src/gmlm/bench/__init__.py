"""Inference speed: PaDIR against autoregressive decoding, measured side by side.

    from gmlm.bench import BenchResult, BenchSettings, format_report, plot_tradeoffs
    from gmlm.bench import render_markdown, run_bench

    result = run_bench("runs/ar", "runs/padir", "runs/data", BenchSettings(sentences=50),
                       json_out="bench.json")
    result = BenchResult.read(Path("bench.json"))  # the same, from the file
    print(format_report(result))          # settings, tables, which system for which job
    figures = plot_tradeoffs(result, Path("plots"))  # BLEU vs latency, vs throughput (PNG)
    markdown = render_markdown(result, [(f.caption, str(f.path)) for f in figures])

The settings (torch-free): :mod:`gmlm.bench.settings`; the timing harness:
:mod:`gmlm.bench.timing`; the systems timed and the CTranslate2 backends:
:mod:`gmlm.bench.systems`; the run and its result: :mod:`gmlm.bench.latency`. Pareto fronts
and the choices behind the words: :mod:`gmlm.bench.tradeoffs`.

Command line: `gmlm bench` (`--replot BENCH_JSON` renders an earlier result again). The names
below are imported when first used, so that `gmlm.bench.settings` (the command line's) loads
no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gmlm.lazy import lazy_names

if TYPE_CHECKING:
    from gmlm.bench.assembly import json_line, speedups
    from gmlm.bench.latency import run_bench
    from gmlm.bench.plots import plot_tradeoffs
    from gmlm.bench.report import format_report, render_markdown
    from gmlm.bench.result import BenchResult
    from gmlm.bench.settings import BenchSettings

_HOMES = {
    "BenchResult": "gmlm.bench.result",
    "BenchSettings": "gmlm.bench.settings",
    "format_report": "gmlm.bench.report",
    "json_line": "gmlm.bench.assembly",
    "plot_tradeoffs": "gmlm.bench.plots",
    "render_markdown": "gmlm.bench.report",
    "run_bench": "gmlm.bench.latency",
    "speedups": "gmlm.bench.assembly",
}

__all__ = [
    "BenchResult",
    "BenchSettings",
    "format_report",
    "json_line",
    "plot_tradeoffs",
    "render_markdown",
    "run_bench",
    "speedups",
]


__getattr__ = lazy_names(__name__, _HOMES)
