"""The benchmark result of :func:`gmlm.bench.run_bench` as tables: aligned text for the
terminal, Markdown for REPORT.md. Both render the same rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gmlm.bench.result import BenchResult, Ctranslate2Info


@dataclass(frozen=True)
class Table:
    """Column names, rows of cells, and how many leading columns hold text (left-aligned);
    the others hold numbers (right-aligned)."""

    header: list[str]
    rows: list[list[str]]
    text_columns: int


def settings_lines(result: BenchResult) -> list[str]:
    s = result.settings
    lines = [
        f"threads {s.threads}, torch {s.torch}, gmlm {s.gmlm}, python {s.python}, "
        f"CPU {s.cpu}, device {s.device}" + (f" ({s.gpu})" if s.gpu else ""),
        f"precisions {', '.join(s.precisions)}; {s.sentences} sentences of split "
        f"'{s.split}' (mean {s.mean_source_tokens} source tokens); warm-up "
        f"{s.warmup} sentences per system and precision; batch sizes "
        f"{', '.join(str(b) for b in s.batch_sizes)}",
    ]
    if s.cuda_graphs:
        lines.append(f"CUDA graphs: {s.cuda_graphs}")
    for role, info in s.checkpoints.items():
        lines.append(
            f"{role}: {info.path} ({info.decoder_layers} decoder layer(s), loaded in "
            f"{info.load_s} s, not counted in any latency)"
        )
    if "ar1" not in s.checkpoints:
        lines.append(f"ar1: {s.ar1}")
    if isinstance(s.ctranslate2, Ctranslate2Info):
        ct2 = s.ctranslate2
        lines.append(f"ctranslate2 {ct2.version} (loaded in {ct2.load_s} s): {ct2.note}")
        if ct2.backend:
            lines.append(f"ctranslate2 backend: {ct2.backend}")
    lines.append(f"fairness: {s.fairness}")
    if s.bleu is not None:
        lines.append(f"BLEU: {s.bleu}")
    if s.padir_decoding is not None:
        lines.append(f"PaDIR decoding besides T and B: {s.padir_decoding}")
    return lines


def latency_table(result: BenchResult) -> Table:
    """One row per precision and system; the BLEU column only in results that have one
    (files written before rows had it show none)."""
    sizes = result.settings.batch_sizes
    scored = all(r.bleu is not None for r in result.results)
    header = [
        "precision",
        "system",
        *(["BLEU"] if scored else []),
        "model p50 ms",
        "p90",
        "p99",
        "e2e p50 ms",
        "p90",
        "p99",
        *(f"sent/s @{b}" for b in sizes),
        *(f"tok/s @{b}" for b in sizes),
    ]
    rows = []
    for r in result.results:
        rows.append(
            [
                r.precision,
                r.system,
                *([f"{r.bleu:.2f}"] if r.bleu is not None else []),
                *(f"{v:.2f}" for v in (r.model.p50_ms, r.model.p90_ms, r.model.p99_ms)),
                *(f"{v:.2f}" for v in (r.e2e.p50_ms, r.e2e.p90_ms, r.e2e.p99_ms)),
                *(f"{r.throughput[str(b)].sentences_per_s:.1f}" for b in sizes),
                *(f"{r.throughput[str(b)].tokens_per_s:.0f}" for b in sizes),
            ]
        )
    return Table(header, rows, 2)


def speedup_table(result: BenchResult) -> Table:
    header = ["precision", "PaDIR", "vs AR", "e2e p50", "e2e p99", "model p50", "model p99"]
    rows = [
        [
            s.precision,
            s.padir,
            s.ar,
            *(f"{v:.2f}x" for v in (s.e2e_p50, s.e2e_p99, s.model_p50, s.model_p99)),
        ]
        for s in result.speedups
    ]
    return Table(header, rows, 3)


def table_text(table: Table) -> str:
    rows = (table.header, *table.rows)
    widths = [max(len(c) for c in column) for column in zip(*rows, strict=True)]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(width) if i < table.text_columns else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def table_markdown(table: Table) -> str:
    align = ["---" if i < table.text_columns else "---:" for i in range(len(table.header))]
    return "\n".join(
        "| " + " | ".join(_escape(cell) for cell in row) + " |"
        for row in (table.header, align, *table.rows)
    )


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|")


SPEEDUP_NOTE = (
    "speed-up = AR latency / PaDIR latency at batch size 1 (>1: PaDIR is faster), median over "
    "median and p99 over p99; e2e = raw text in, text out; model = ids in, ids out"
)


def format_report(result: BenchResult) -> str:
    """The settings, the latency/throughput table and the speed-up table, for people."""
    parts: Sequence[str] = (
        "\n".join(f"settings: {line}" for line in settings_lines(result)),
        "batch-1 latency (median, p90, p99) and throughput at each batch size:",
        table_text(latency_table(result)),
        SPEEDUP_NOTE + ":",
        table_text(speedup_table(result)),
    )
    return "\n\n".join(parts)


def render_markdown(result: BenchResult) -> str:
    """The same report as Markdown (settings as a list, two tables), e.g. for REPORT.md."""
    return "\n\n".join(
        (
            "\n".join(f"- {line}" for line in settings_lines(result)),
            "Batch-1 latency (median, p90, p99; ms) and throughput (sentences/s and output "
            "tokens/s) at each batch size:",
            table_markdown(latency_table(result)),
            SPEEDUP_NOTE[0].upper() + SPEEDUP_NOTE[1:] + ":",
            table_markdown(speedup_table(result)),
        )
    )
