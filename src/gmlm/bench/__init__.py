"""Inference speed: PaDIR against autoregressive decoding, measured side by side.

    from gmlm.bench import BenchResult, format_report, render_markdown, run_bench

    result = run_bench("runs/ar", "runs/padir", "runs/data", json_out="bench.json")
    result = BenchResult.read(Path("bench.json"))  # the same, from the file
    print(format_report(result))          # settings, latency/throughput and speed-up tables
    markdown = render_markdown(result)        # the same for REPORT.md

Command line: `gmlm bench`.
"""

from gmlm.bench.latency import DEFAULT_SENTENCES, json_line, run_bench, speedups
from gmlm.bench.report import format_report, render_markdown
from gmlm.bench.result import BenchResult

__all__ = [
    "DEFAULT_SENTENCES",
    "BenchResult",
    "format_report",
    "json_line",
    "render_markdown",
    "run_bench",
    "speedups",
]
