"""Figures as PNG files: matplotlib on its file-only backend (Agg, no display needed),
imported when a figure is drawn (`gmlm --help` and the commands that draw nothing never load
it), and each PNG written atomically (:func:`gmlm.io.atomic_open`), so a crash never leaves
half an image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gmlm.io import atomic_open


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path, dpi: int = 120) -> None:
    """Write the figure `fig` to `path` as a PNG (atomically) and close it."""
    with atomic_open(path, "wb", encoding=None) as handle:
        fig.savefig(handle, format="png", dpi=dpi)
    pyplot().close(fig)
