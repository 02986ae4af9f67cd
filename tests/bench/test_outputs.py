"""`gmlm bench --plots DIR` and `--replot BENCH_JSON`: the Markdown links the plots, an
earlier result is re-rendered without timing, and wrong combinations or paths are one-line
errors before any work."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from gmlm.bench import format_report, json_line, render_markdown
from gmlm.bench.plots import PLOT_FILES
from gmlm.cli import bench as bench_cli
from gmlm.cli.main import main
from tests.helpers.bench import FIXTURE, fixture


@pytest.fixture
def no_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("run_bench ran")

    monkeypatch.setattr("gmlm.bench.run_bench", never)


def test_replot_renders_an_earlier_result_without_timing(tmp_path: Path, no_timing: None) -> None:
    pytest.importorskip("matplotlib")
    source = tmp_path / "runs" / "bench.json"
    source.parent.mkdir()
    shutil.copy(FIXTURE, source)
    markdown = tmp_path / "docs" / "speed" / "bench.md"
    args = ["bench", "--replot", str(source), "--plots", str(tmp_path / "docs" / "plots")]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([*args, "--markdown", str(markdown)]) == 0
    result = fixture()
    assert stdout.getvalue() == format_report(result) + "\n" + json_line(result) + "\n"
    links = [
        ("BLEU vs batch-1 median latency", f"../plots/{PLOT_FILES[0]}"),
        ("BLEU vs throughput", f"../plots/{PLOT_FILES[1]}"),
    ]
    assert markdown.read_text(encoding="utf-8") == render_markdown(result, links) + "\n"
    for name in PLOT_FILES:
        assert (tmp_path / "docs" / "plots" / name).read_bytes().startswith(b"\x89PNG")
    assert source.read_bytes() == FIXTURE.read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--replot", "{json}", "--ar", "a", "--output", "o.json"],
            "--replot re-renders {json} without timing anything: drop --ar, --output",
        ),
        (
            ["--padir", "p"],
            "gmlm bench needs --ar, --data (or --replot BENCH_JSON to re-render an earlier "
            "run without timing)",
        ),
        (
            ["--replot", "{missing}"],
            "--replot {missing} does not exist: run the step that writes it first",
        ),
        (
            ["--replot", "{json}", "--markdown", "{json}"],
            "--markdown {json} is the --replot file this command reads; choose another path",
        ),
        (
            ["--ar", "a", "--padir", "p", "--data", "d", "--plots", "{json}"],
            "--plots {json}/{png}: {json} is a file, not a folder; choose another path",
        ),
    ],
    ids=["replot-and-timing", "missing-inputs", "missing-replot", "replot-over-itself", "plots"],
)
def test_wrong_combinations_and_paths_are_one_line_errors_before_any_work(
    argv: list[str],
    message: str,
    tmp_path: Path,
    no_timing: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "bench.json"
    shutil.copy(FIXTURE, source)
    names = {"json": source, "missing": tmp_path / "none.json", "png": PLOT_FILES[0]}
    assert main(["bench", *(arg.format(**names) for arg in argv)]) == 2
    assert capsys.readouterr().err == f"gmlm: error: {message.format(**names)}\n"
    assert source.read_bytes() == FIXTURE.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


def test_cli_plot_names_match_the_library() -> None:
    assert bench_cli.PLOT_FILES == PLOT_FILES
