"""The benchmark result of :func:`gmlm.bench.run_bench` as tables: aligned text for the
terminal, Markdown for REPORT.md. Both render the same rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gmlm.bench.result import BenchResult, Ctranslate2Info
from gmlm.bench.tradeoffs import advice


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
        f"{', '.join(str(b) for b in s.batch_sizes)}"
        + (f" (decoder batches of {s.max_tokens} padded tokens at most)" if s.max_tokens else ""),
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


def length_table(result: BenchResult) -> Table | None:
    """The speed-ups within each share of the sentences by source length (None in results
    written before the bench had them); the shares are the same sentences in every row."""
    if not result.by_length:
        return None
    shares = [f"{g.min_tokens}-{g.max_tokens} tok" for g in result.by_length[0].groups]
    header = [
        "precision",
        "PaDIR",
        "vs AR",
        *(f"e2e p50 {share}" for share in shares),
        *(f"model p50 {share}" for share in shares),
    ]
    rows = [
        [
            s.precision,
            s.padir,
            s.ar,
            *(f"{g.e2e_p50:.2f}x" for g in s.groups),
            *(f"{g.model_p50:.2f}x" for g in s.groups),
        ]
        for s in result.by_length
    ]
    return Table(header, rows, 3)


def padding_table(result: BenchResult) -> Table | None:
    """The padded share of each PaDIR row's decoder row-positions at each batch size timed
    (None in results written before the bench measured it)."""
    sizes = [b for b in result.settings.batch_sizes if b > 1]
    rows = [
        [r.precision, r.system, *(_share(r.throughput[str(b)].padded_share) for b in sizes)]
        for r in result.results
        if r.kind == "padir" and any(r.throughput[str(b)].padded_share is not None for b in sizes)
    ]
    if not rows:
        return None
    return Table(["precision", "system", *(f"padded @{b}" for b in sizes)], rows, 2)


PADDING_NOTE = (
    "padded share of PaDIR's decoder row-positions at each batch size (positions past a "
    "candidate's length in the passes run; gmlm.decoding.refinement.PaddingStats)"
)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def length_note(result: BenchResult) -> str:
    """What :func:`length_table` shows (for results that have it)."""
    assert result.by_length
    sizes = "/".join(str(g.sentences) for g in result.by_length[0].groups)
    return (
        "speed-up by source length = AR median / PaDIR median at batch size 1 within each share "
        f"of the timed sentences by source tokens (the ar model's tokens; {sizes} sentences, "
        "shortest first): whether PaDIR's lead grows with the length, as it does where a "
        "decoder pass costs about the same at any length"
    )


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
    """The settings, the latency/throughput table, the speed-up tables (overall and by
    source length) and which system to pick for which job (when the rows have a BLEU), for
    people."""
    parts: list[str] = [
        "\n".join(f"settings: {line}" for line in settings_lines(result)),
        "batch-1 latency (median, p90, p99) and throughput at each batch size:",
        table_text(latency_table(result)),
        SPEEDUP_NOTE + ":",
        table_text(speedup_table(result)),
    ]
    padded = padding_table(result)
    if padded is not None:
        parts += [PADDING_NOTE + ":", table_text(padded)]
    by_length = length_table(result)
    if by_length is not None:
        parts += [length_note(result) + ":", table_text(by_length)]
    choice = advice(result)
    if choice is not None:
        parts.append("\n".join([choice.intro + ":", *(f"  {line}" for line in choice.lines)]))
    return "\n\n".join(parts)


def render_markdown(result: BenchResult, figures: Sequence[tuple[str, str]] = ()) -> str:
    """The same report as Markdown, e.g. for REPORT.md: which system to pick for which job
    first (when the rows have a BLEU), then `figures` ((caption, link) pairs: the trade-off
    plots of :mod:`gmlm.bench.plots`), the settings as a list and the tables."""
    parts = []
    choice = advice(result)
    if choice is not None:
        lines = (_sentence(line) for line in choice.lines)
        parts += [choice.intro + ":", "\n".join(f"- {line}." for line in lines)]
    parts += [f"![{caption}]({link})" for caption, link in figures]
    parts += [
        "How the numbers were made:",
        "\n".join(f"- {line}" for line in settings_lines(result)),
        "Batch-1 latency (median, p90, p99; ms) and throughput (sentences/s and output "
        "tokens/s) at each batch size:",
        table_markdown(latency_table(result)),
    ]
    padded = padding_table(result)
    if padded is not None:
        parts += [_sentence(PADDING_NOTE) + ":", table_markdown(padded)]
    parts += [
        _sentence(SPEEDUP_NOTE) + ":",
        table_markdown(speedup_table(result)),
    ]
    by_length = length_table(result)
    if by_length is not None:
        parts += [_sentence(length_note(result)) + ":", table_markdown(by_length)]
    return "\n\n".join(parts)


def _sentence(note: str) -> str:
    return note[0].upper() + note[1:]
