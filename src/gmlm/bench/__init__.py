"""Inference speed: PaDIR against autoregressive decoding, measured side by side.

    from gmlm.bench import BenchResult, format_report, plot_tradeoffs, render_markdown, run_bench

    result = run_bench("runs/ar", "runs/padir", "runs/data", json_out="bench.json")
    result = BenchResult.read(Path("bench.json"))  # the same, from the file
    print(format_report(result))          # settings, tables, which system for which job
    figures = plot_tradeoffs(result, Path("plots"))  # BLEU vs latency, vs throughput (PNG)
    markdown = render_markdown(result, [(f.caption, str(f.path)) for f in figures])

Pareto fronts and the choices behind the words: :mod:`gmlm.bench.tradeoffs`.

Command line: `gmlm bench` (`--replot BENCH_JSON` renders an earlier result again).
"""

from gmlm.bench.latency import DEFAULT_SENTENCES, json_line, run_bench, speedups
from gmlm.bench.plots import plot_tradeoffs
from gmlm.bench.report import format_report, render_markdown
from gmlm.bench.result import BenchResult

__all__ = [
    "DEFAULT_SENTENCES",
    "BenchResult",
    "format_report",
    "json_line",
    "plot_tradeoffs",
    "render_markdown",
    "run_bench",
    "speedups",
]
