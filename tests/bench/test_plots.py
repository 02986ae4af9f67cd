"""The trade-off plots: two PNGs, every row a labelled point, no two labels on top of each
other, the Pareto front a step line through its rows; nothing for a file without BLEU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gmlm.bench import plots
from gmlm.bench.tradeoffs import latency_front, points, throughput_front
from tests.helpers.bench import fixture

pytest.importorskip("matplotlib")


def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """What each figure holds when saved, by file name: its labels, the pairs of labels that
    overlap, and its step line (draw style, points)."""
    drawn: dict[str, dict[str, Any]] = {}
    real_save = plots.save_png

    def record(fig: Any, path: Path, dpi: int = 120) -> None:
        (ax,) = fig.axes
        renderer = fig.canvas.get_renderer()
        notes = [t for t in ax.texts if t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in notes]
        (step,) = [line for line in ax.get_lines() if len(line.get_xdata()) > 0]
        drawn[path.name] = {
            "labels": [t.get_text() for t in notes],
            "overlaps": [
                (notes[i].get_text(), notes[j].get_text())
                for i in range(len(boxes))
                for j in range(i)
                if boxes[i].overlaps(boxes[j])
            ],
            "step": (
                step.get_drawstyle(),
                list(zip(step.get_xdata(), step.get_ydata(), strict=True)),
            ),
        }
        real_save(fig, path, dpi)

    monkeypatch.setattr(plots, "save_png", record)
    return drawn


def test_two_pngs_with_every_row_labelled_and_the_front_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = recorded(monkeypatch)
    result = fixture()
    figures = plots.plot_tradeoffs(result, tmp_path / "plots")
    assert [f.path for f in figures] == [tmp_path / "plots" / name for name in plots.PLOT_FILES]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(plots.PLOT_FILES)
    for figure in figures:
        assert figure.path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    found = points(result)
    latency, throughput = drawn[plots.LATENCY_PNG], drawn[plots.THROUGHPUT_PNG]
    assert sorted(latency["labels"]) == sorted(p.label for p in found)
    # Two batch sizes were timed: each throughput label says where its best was.
    assert sorted(throughput["labels"]) == sorted(f"{p.label} @{p.batch_size}" for p in found)
    assert latency["overlaps"] == [] and throughput["overlaps"] == []
    # The step line runs through the front's points, slowest last: by latency across, then
    # up to the next (the best BLEU within a budget); by throughput down, then across (the
    # best BLEU at a required throughput).
    front = [(p.latency_ms, p.bleu) for p in latency_front(found)]
    assert latency["step"] == ("steps-post", front)
    front = [(p.throughput, p.bleu) for p in throughput_front(found)]
    assert throughput["step"] == ("steps-pre", front)


def test_labels_of_crowded_points_are_moved_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every PaDIR row at one BLEU: 26.0 and 26.4 ms (and 22.2 ms) sit side by side, where
    labels written at the same place beside each point would cover each other."""
    drawn = recorded(monkeypatch)
    result = fixture({row.system: 1.5 for row in fixture().results if row.kind == "padir"})
    plots.plot_tradeoffs(result, tmp_path)
    assert len(drawn[plots.LATENCY_PNG]["labels"]) == 12
    assert drawn[plots.LATENCY_PNG]["overlaps"] == []
    assert drawn[plots.THROUGHPUT_PNG]["overlaps"] == []


def test_no_plots_for_a_file_without_bleu(tmp_path: Path) -> None:
    older = fixture({row.system: None for row in fixture().results})
    assert plots.plot_tradeoffs(older, tmp_path / "plots") == []
    assert not (tmp_path / "plots").exists()
