"""The bench's trade-offs as two pictures (PNG): BLEU against batch-1 median latency and
BLEU against throughput, every row (system and precision) a labelled point, the Pareto front
(:mod:`gmlm.bench.tradeoffs`) drawn as a step line: the best BLEU to be had at each speed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm.bench.result import BenchResult
from gmlm.bench.tradeoffs import Point, latency_front, points, throughput_front
from gmlm.plotting import pyplot, save_png

# The files plot_tradeoffs writes into its folder.
LATENCY_PNG = "bleu_vs_latency.png"
THROUGHPUT_PNG = "bleu_vs_throughput.png"
PLOT_FILES = (LATENCY_PNG, THROUGHPUT_PNG)


@dataclass(frozen=True)
class Figure:
    """A picture written: its caption and where it is."""

    caption: str
    path: Path


def plot_tradeoffs(result: BenchResult, folder: Path) -> list[Figure]:
    """Write FOLDER/bleu_vs_latency.png and FOLDER/bleu_vs_throughput.png; none (an empty
    list) when the rows have no BLEU (a file written before rows had one)."""
    found = points(result)
    if not found:
        return []
    s = result.settings
    where = f"{s.device}" + (f" ({s.gpu})" if s.gpu else f" ({s.cpu})") + f", {s.threads} threads"
    latency = Figure("BLEU vs batch-1 median latency", Path(folder) / LATENCY_PNG)
    _draw(
        found,
        latency_front(found),
        lambda p: p.latency_ms,
        xlabel="batch-1 median latency, text in, text out (ms, log scale)",
        title=f"BLEU vs latency: {where}",
        step="post",
        path=latency.path,
    )
    sizes = s.batch_sizes
    batch = (
        f"batch size {sizes[0]}"
        if len(sizes) == 1
        else "best of batch sizes " + ", ".join(str(b) for b in sizes)
    )
    throughput = Figure("BLEU vs throughput", Path(folder) / THROUGHPUT_PNG)
    _draw(
        found,
        throughput_front(found),
        lambda p: p.throughput,
        xlabel=f"throughput, sentences/s ({batch}; log scale)",
        title=f"BLEU vs throughput: {where}",
        step="pre",
        path=throughput.path,
        suffix=len(sizes) > 1,
    )
    return [latency, throughput]


def _draw(
    found: Sequence[Point],
    front: Sequence[Point],
    x_of: Callable[[Point], float],
    *,
    xlabel: str,
    title: str,
    step: str,
    path: Path,
    suffix: bool = False,
) -> None:
    """Each point at (`x_of` it, its BLEU), coloured by precision, round for PaDIR and square
    for AR, labelled; the front as a step line (`step`: "post" where lower x is better, the
    best BLEU within a latency budget; "pre" where higher x is, the best BLEU at a required
    throughput)."""
    plt = pyplot()
    import matplotlib

    fig, ax = plt.subplots(figsize=(8.0, 5.6))
    precisions = list(dict.fromkeys(p.precision for p in found))
    colours = {name: f"C{i}" for i, name in enumerate(precisions)}
    on_front = set(front)
    for point in found:
        ax.scatter(
            x_of(point),
            point.bleu,
            color=colours[point.precision],
            marker="o" if point.kind == "padir" else "s",
            edgecolors="black" if point in on_front else "none",
            zorder=3,
            s=36,
        )
    ax.step(
        [x_of(p) for p in front], [p.bleu for p in front], where=step, color="black", lw=1, zorder=2
    )
    for precision, colour in colours.items():
        ax.scatter([], [], color=colour, marker="D", label=precision)
    for marker, family in (("o", "PaDIR"), ("s", "autoregressive")):
        ax.scatter([], [], marker=marker, facecolors="none", edgecolors="gray", label=family)
    ax.plot([], [], color="black", lw=1, label="Pareto front (black-edged points)")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel("BLEU (the timed sentences)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.margins(x=0.15, y=0.08)
    fig.tight_layout()
    labels = [
        (
            x_of(p),
            p.bleu,
            p.label + (f" @{p.batch_size}" if suffix else ""),
            colours[p.precision],
        )
        for p in found
    ]
    _label(fig, ax, labels)
    save_png(fig, path)


# Where a point's label may go, in points from the point, tried in turn.
OFFSETS = [(dx, dy) for dy in (3, -9, 10, -16, 17, -23) for dx in (4, -4)]


def _label(fig: Any, ax: Any, labels: Sequence[tuple[float, float, str, str]]) -> None:
    """Write each label (x, y, text, colour) beside its point at the first place of OFFSETS
    where it stays inside the axes and covers no label placed before, no point and not the
    legend (at the first place, overlaps and all, where none is free)."""
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    taken = [ax.get_legend().get_window_extent(renderer)]
    for x, y, _, _ in labels:
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    inside = ax.get_window_extent(renderer)

    def free(box: Any) -> bool:
        within = inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
        return within and not any(box.overlaps(other) for other in taken)

    for label in labels:
        for offset in OFFSETS:
            note = _annotate(ax, label, offset)
            if free(note.get_window_extent(renderer)):
                break
            note.remove()
        else:
            note = _annotate(ax, label, OFFSETS[0])
        taken.append(note.get_window_extent(renderer))


def _annotate(ax: Any, label: tuple[float, float, str, str], offset: tuple[int, int]) -> Any:
    x, y, text, colour = label
    return ax.annotate(
        text,
        (x, y),
        xytext=offset,
        textcoords="offset points",
        fontsize=6,
        color=colour,
        ha="left" if offset[0] > 0 else "right",
    )
