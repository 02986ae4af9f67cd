"""The figures of REPORT.md (PNG, written atomically), each from typed results; a function
returns the path it wrote, or None when there is nothing to draw."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from gmlm.bench.result import BenchResult
from gmlm.evaluation.results import EvaluationScores
from gmlm.plotting import pyplot, save_png


def plot_bleu_vs_steps(scores: EvaluationScores, path: Path) -> Path | None:
    """BLEU of each PaDIR B against its steps T, the other systems as horizontal lines."""
    padir = [
        (r.length_beam, r.steps, r.quality.bleu)
        for r in scores.systems
        if r.run == "padir" and r.length_beam is not None and r.steps is not None
    ]
    if not padir:
        return None
    plt = pyplot()
    import matplotlib

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for b in sorted({beam for beam, _, _ in padir}):
        pts = sorted((steps, bleu) for beam, steps, bleu in padir if beam == b)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"PaDIR B={b}")
    # One line style per AR system (up to 6 differ: teacher and student, greedy and beam, ar1).
    styles = itertools.cycle(["--", ":", "-.", (0, (3, 1, 1, 1, 1, 1)), (0, (1, 4)), (0, (8, 3))])
    for r in scores.systems:
        if r.run != "padir":
            ax.axhline(r.quality.bleu, linestyle=next(styles), color="gray", label=r.label)
    ax.set_xlabel("refinement steps T")
    ax.set_ylabel(f"BLEU ({scores.split})")
    ax.set_xscale("log")
    ax.set_xticks(sorted({steps for _, steps, _ in padir}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, path)
    return path


def plot_latency_vs_batch(bench: BenchResult, path: Path) -> Path | None:
    """Milliseconds per sentence (1000 / throughput) against batch size, one line per
    system, one panel per precision."""
    results = [r for r in bench.results if r.throughput]
    if not results:
        return None
    plt = pyplot()

    precisions = sorted({r.precision for r in results})
    fig, axes = plt.subplots(
        1, len(precisions), figsize=(5.2 * len(precisions), 4.2), squeeze=False
    )
    for ax, precision in zip(axes[0], precisions, strict=True):
        ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i / 19) for i in range(20)])
        for r in results:
            if r.precision != precision:
                continue
            points = sorted((int(b), 1000.0 / v.sentences_per_s) for b, v in r.throughput.items())
            style = "-" if r.kind == "padir" else "--"
            ax.plot(
                [p[0] for p in points], [p[1] for p in points], style, marker="o", label=r.system
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("ms per sentence (1000 / throughput)")
        ax.set_title(precision)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_png(fig, path)
    return path


def plot_validation(
    curves: dict[str, list[dict[str, Any]]], labels: dict[str, str], path: Path
) -> Path | None:
    """Validation BLEU against the training step, one line per run (`curves`: run name -> its
    validation records from metrics.jsonl)."""
    points = {
        name: [(int(r["step"]), r["valid_bleu"]) for r in records if "valid_bleu" in r]
        for name, records in curves.items()
    }
    if not any(points.values()):
        return None
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, pts in points.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=labels[name])
    ax.set_xlabel("training step")
    ax.set_ylabel("validation BLEU")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, path)
    return path
