"""The files `gmlm bench` writes for people besides bench.json: the Markdown report and the
trade-off plots (:mod:`gmlm.bench.plots`), from a fresh run or from an existing bench.json
re-rendered without timing (`--replot`). Their paths are checked before the minutes of
timing (:func:`gmlm.io.check_output_files`), and the Markdown links the plots."""

from __future__ import annotations

import os
from pathlib import Path

from gmlm.bench.plots import PLOT_FILES, plot_tradeoffs
from gmlm.bench.report import render_markdown
from gmlm.bench.result import BenchResult
from gmlm.errors import GmlmError
from gmlm.io import Inputs, atomic_write_text, check_output_files


def check_outputs(
    *,
    output: Path | None,
    markdown: Path | None,
    plots: Path | None,
    inputs: Inputs,
) -> None:
    """Fail now where a file of `output` (bench.json), `markdown` or the plots in the folder
    `plots` could not be written or must not be replaced, or two of them are one file
    (`inputs`: the command's; :func:`gmlm.io.check_output_files`)."""
    files = [("--output", output), ("--markdown", markdown)]
    files += [("--plots", None if plots is None else Path(plots) / name) for name in PLOT_FILES]
    check_output_files(files, inputs=inputs)


def write_outputs(result: BenchResult, *, markdown: Path | None, plots: Path | None) -> None:
    """Draw the trade-off plots into the folder `plots` and write the Markdown report to
    `markdown`, linking the plots by their paths relative to it (each when given)."""
    figures = plot_tradeoffs(result, plots) if plots is not None else []
    if markdown is not None:
        start = Path(markdown).resolve().parent
        links = [
            (figure.caption, Path(os.path.relpath(figure.path.resolve(), start)).as_posix())
            for figure in figures
        ]
        atomic_write_text(markdown, render_markdown(result, links) + "\n")


def read_result(path: Path, flag: str) -> BenchResult:
    """The bench.json at `path`, given by the option `flag`; an error names the flag."""
    try:
        return BenchResult.read(path)
    except GmlmError as err:
        raise GmlmError(f"{flag} {err}") from None
