"""`gmlm bench`: every system and key in the JSON line, ratio arithmetic, errors."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
import torch

from gmlm.bench import format_report, render_markdown, run_bench, speedups
from gmlm.bench.assembly import length_groups, length_speedups
from gmlm.bench.plots import PLOT_FILES
from gmlm.bench.result import (
    BenchResult,
    BenchRow,
    LengthGroup,
    LengthSpeedup,
    Percentiles,
    Rates,
    Speedup,
)
from gmlm.bench.settings import BenchSettings
from gmlm.bench.timing import Latencies, percentiles
from gmlm.cli.main import main
from gmlm.data import load_dataset
from gmlm.decoding import RefinementOptions
from gmlm.decoding.autoregressive import SearchOptions
from gmlm.decoding.options import PRECISIONS
from gmlm.errors import GmlmError
from gmlm.translation.translator import Translator
from tests.helpers.checkpoints import write_checkpoint

PADIR_SYSTEMS = [f"padir T={t} B={b}" for t in (1, 2, 4, 10) for b in (1, 5)]
AR_SYSTEMS = ["ar greedy", "ar beam5"]
FAST = ["--sentences", "3", "--warmup", "1", "--threads", "1", "--batch-sizes", "1,2"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoints(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bench-ckpt")
    tokenizer = load_dataset(word_task_data).tokenizer
    return {
        "ar": write_checkpoint(root / "ar", "ar", tokenizer),
        "padir": write_checkpoint(root / "padir", "padir", tokenizer),
        "ar1": write_checkpoint(root / "ar1", "ar", tokenizer, n_decoder_layers=1),
    }


@pytest.fixture(scope="module")
def cli_run(
    checkpoints: dict[str, Path], word_task_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, Any], Path]:
    """`gmlm bench` with every precision and no --ar1: (stdout, last-line JSON, json file)."""
    import contextlib
    import io

    json_file = tmp_path_factory.mktemp("bench") / "bench.json"
    args = ["bench", "--ar", str(checkpoints["ar"]), "--padir", str(checkpoints["padir"])]
    args += ["--data", str(word_task_data), *FAST, "--output", str(json_file)]
    args += ["--markdown", str(json_file.with_suffix(".md")), "--plots", str(json_file.parent)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(args) == 0
    text = stdout.getvalue()
    return text, json.loads(text.rstrip("\n").split("\n")[-1]), json_file


def test_json_line_last_with_every_system_and_key(
    cli_run: tuple[str, dict[str, Any], Path],
) -> None:
    text, result, json_file = cli_run
    assert json.loads(json_file.read_text(encoding="utf-8")) == result
    markdown = json_file.with_suffix(".md").read_text(encoding="utf-8")
    plots = [
        ("BLEU vs batch-1 median latency", PLOT_FILES[0]),
        ("BLEU vs throughput", PLOT_FILES[1]),
    ]
    parsed = BenchResult.from_json(result, "the JSON line")
    assert markdown == render_markdown(parsed, plots) + "\n"
    assert all((json_file.parent / name).is_file() for name in PLOT_FILES)
    settings = result["settings"]
    for key in ("threads", "torch", "cpu", "precisions", "sentences", "warmup", "fairness"):
        assert key in settings
    assert settings["threads"] == 1 and settings["sentences"] == 3 and settings["warmup"] == 1
    assert settings["torch"] == torch.__version__ and settings["cpu"]
    assert "skipped" in settings["ar1"] and "ar1: skipped" in text
    assert settings["ctranslate2"] == "skipped (no --ctranslate2 given)"
    assert "settings: ctranslate2" not in text  # its settings line only with its rows
    systems = PADIR_SYSTEMS + AR_SYSTEMS
    assert [(r["precision"], r["system"]) for r in result["results"]] == [
        (p, s) for p in PRECISIONS for s in systems
    ]
    for row in result["results"]:
        for measure in ("model", "e2e"):
            assert set(row[measure]) == {"p50_ms", "p90_ms", "p99_ms", "mean_ms"}
            assert 0 < row[measure]["p50_ms"] <= row[measure]["p90_ms"] <= row[measure]["p99_ms"]
        assert set(row["throughput"]) == {"1", "2"}
        for rates in row["throughput"].values():
            assert rates["sentences_per_s"] > 0 and rates["tokens_per_s"] > 0
        # the padded share of PaDIR's passes, at the batch size over 1
        share = row["throughput"]["2"].get("padded_share")
        assert (share is not None and 0 <= share < 1) == (row["kind"] == "padir")
        assert "padded_share" not in row["throughput"]["1"]
    for where in (text, markdown):
        note = "added share of PaDIR's decoder row-positions at each batch size"
        table = where.split(note)[1].replace("|", "  ")
        assert re.fullmatch(r"\d+\.\d%", printed_cells(table, "fp32", "padir T=4 B=5")[2])
    pairs = {(s["precision"], s["padir"], s["ar"]) for s in result["speedups"]}
    assert pairs == {(p, d, a) for p in PRECISIONS for d in PADIR_SYSTEMS for a in AR_SYSTEMS}


def printed_cells(text: str, first: str, second: str) -> list[str]:
    """The cells of the printed table row that starts with `first` and `second`."""
    for line in text.split("\n"):
        cells = re.split(r"\s{2,}", line.strip())
        if cells[:2] == [first, second]:
            return cells
    raise AssertionError(f"no printed row {first} {second}")


def printed_speedup(text: str, precision: str, padir: str, ar: str) -> list[str]:
    for line in text.split("\n"):
        cells = re.split(r"\s{2,}", line.strip())
        if cells[:3] == [precision, padir, ar]:
            return cells
    raise AssertionError(f"no printed speed-up {padir} vs {ar}")


def test_printed_ratios_are_ar_over_padir_of_printed_statistics(
    cli_run: tuple[str, dict[str, Any], Path],
) -> None:
    text, _, _ = cli_run
    # Columns: precision, system, BLEU, model p50, p90, p99, e2e p50, p90, p99, throughput...
    columns = {"model_p50": 3, "model_p99": 5, "e2e_p50": 6, "e2e_p99": 8}
    # Speed-up columns: precision, padir, ar, e2e p50, e2e p99, model p50, model p99.
    ratio_columns = {"e2e_p50": 3, "e2e_p99": 4, "model_p50": 5, "model_p99": 6}
    checked = 0
    for precision in PRECISIONS:
        for padir in PADIR_SYSTEMS:
            for ar in AR_SYSTEMS:
                p_cells = printed_cells(text, precision, padir)
                a_cells = printed_cells(text, precision, ar)
                s_cells = printed_speedup(text, precision, padir, ar)
                for stat, column in columns.items():
                    expected = float(a_cells[column]) / float(p_cells[column])
                    shown = float(s_cells[ratio_columns[stat]].rstrip("x"))
                    # Both printed to 2 decimals: allow for that rounding only.
                    assert shown == pytest.approx(expected, rel=0.01, abs=0.011), (stat, padir, ar)
                    checked += 1
    assert checked == len(PRECISIONS) * 8 * 2 * 4


def test_each_row_scores_its_own_translations(
    checkpoints: dict[str, Path], word_task_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row BLEU = sacreBLEU of exactly what that system output for the timed sentences: the
    translators are replaced by known outputs (the reference, cut to each system's own number
    of words), and every row must match sacreBLEU run independently on those outputs."""
    references = load_dataset(word_task_data).read_text("test", "tgt")
    keep = {"padir T=4 B=1": 1, "padir T=4 B=5": 2, "ar greedy": 3}  # ar beam5: all words

    sources = load_dataset(word_task_data).read_text("test", "src")

    def known(translator, sentences, options, **kwargs):  # type: ignore[no-untyped-def]
        words = references[sources.index(sentences[0])].split()
        return [" ".join(words[: keep.get(system_name(options), len(words))])]

    monkeypatch.setattr(Translator, "translate", known)
    result = run_bench(
        checkpoints["ar"],
        checkpoints["padir"],
        word_task_data,
        BenchSettings(
            sentences=4,
            warmup=0,
            threads=1,
            precisions=["fp32", "int8"],
            batch_sizes=[1],
            padir_steps=[4],
            length_beams=[1, 5],
        ),
    )
    chosen = references[:4]
    for row in result.results:
        words = keep.get(row.system)
        outputs = [" ".join(r.split()[:words]) for r in chosen]
        expected = sacrebleu.corpus_bleu(outputs, [chosen]).score
        assert row.bleu == round(expected, 2), row.system
    assert {r.system: r.bleu for r in result.results if r.precision == "fp32"}["ar beam5"] == 100
    assert result.settings.bleu is not None and "4 sentences" in result.settings.bleu
    assert "| fp32 | ar beam5 | 100.00 |" in render_markdown(result)


def test_speedups_and_percentiles_arithmetic() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    assert percentiles(values) == Percentiles(p50_ms=50.5, p90_ms=90.1, p99_ms=99.01, mean_ms=50.5)

    def row(system: str, kind: str, p50: float, p99: float) -> BenchRow:
        stats = Percentiles(p50_ms=p50, p90_ms=p50, p99_ms=p99, mean_ms=p50)
        return BenchRow(
            precision="fp32",
            system=system,
            role=kind,
            kind=kind,
            model_params=1,
            mean_output_tokens=1.0,
            model=stats,
            e2e=stats,
            throughput={},
        )

    rows = speedups([row("padir T=4 B=5", "padir", 10.0, 20.0), row("ar beam5", "ar", 25.0, 100.0)])
    assert rows == [
        Speedup(
            precision="fp32",
            padir="padir T=4 B=5",
            ar="ar beam5",
            model_p50=2.5,
            model_p99=5.0,
            e2e_p50=2.5,
            e2e_p99=5.0,
        )
    ]


def test_length_groups_are_shares_by_source_length_shortest_first() -> None:
    assert length_groups([5, 1, 3, 2, 4, 6, 3]) == [[1, 3, 2], [6, 4], [0, 5]]
    assert length_groups([7, 7]) == [[0], [1]]  # fewer sentences than shares: no empty share
    assert length_groups([4, 2, 9], count=1) == [[1, 0, 2]]


def test_length_speedups_are_ratios_of_medians_within_each_share() -> None:
    lengths = [5, 1, 3, 2, 4, 6]  # shares: sentences 1, 3 (1-2 tok); 2, 4 (3-4); 0, 5 (5-6)
    padir = [0.010, 0.001, 0.002, 0.003, 0.004, 0.030]
    ar = [0.050, 0.002, 0.010, 0.004, 0.008, 0.070]
    measured = Latencies(
        model={"p": padir, "a": ar},
        e2e={"p": [t + 0.001 for t in padir], "a": [t + 0.001 for t in ar]},
        tokens={"p": 0, "a": 0},
        translations={"p": [], "a": []},
    )
    rows = length_speedups("int8", {"p": "padir", "a": "ar"}, measured, lengths)
    # Medians in ms: PaDIR 2, 3, 20 (model) and 3, 4, 21 (e2e); AR 3, 9, 60 and 4, 10, 61.
    assert rows == [
        LengthSpeedup(
            precision="int8",
            padir="p",
            ar="a",
            groups=(
                LengthGroup(min_tokens=1, max_tokens=2, sentences=2, model_p50=1.5, e2e_p50=1.333),
                LengthGroup(min_tokens=3, max_tokens=4, sentences=2, model_p50=3.0, e2e_p50=2.5),
                LengthGroup(min_tokens=5, max_tokens=6, sentences=2, model_p50=3.0, e2e_p50=2.905),
            ),
        )
    ]


class WorkClock:
    """A fake clock that moves only while a translator works, by known amounts.

    Each `Translator.translate_ids` call of a system costs unit(system) * (CALL + the source
    tokens of its batch) seconds; a `translate` call (text in, text out) costs TEXT seconds on
    top of the translate_ids call it makes. Model-only calls are recorded with their batch
    size (None in the batch-1 latency pass), source and output lengths, cost and the
    row-positions its PaDIR passes computed and how many were content (0, 0 for AR)."""

    CALL, TEXT = 4, 0.0005

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        self.calls: list[tuple[str, int | None, list[int], list[int], float, tuple[int, int]]] = []
        self.in_text = False
        translate_ids, translate = Translator.translate_ids, Translator.translate

        def timed_ids(translator, sources, options, **kwargs):  # type: ignore[no-untyped-def]
            before = translator.padding.computed, translator.padding.content
            out = translate_ids(translator, sources, options, **kwargs)
            passes = (
                translator.padding.computed - before[0],
                translator.padding.content - before[1],
            )
            name = system_name(options)
            cost = unit(name) * (self.CALL + sum(len(s) for s in sources))
            self.now += cost
            if not self.in_text:
                lengths = [len(s) for s in sources]
                size = kwargs.get("batch_size")
                self.calls.append((name, size, lengths, [len(o) for o in out], cost, passes))
            return out

        def timed_text(translator, sentences, options, **kwargs):  # type: ignore[no-untyped-def]
            self.in_text = True
            try:
                out = translate(translator, sentences, options, **kwargs)
            finally:
                self.in_text = False
            self.now += self.TEXT
            return out

        monkeypatch.setattr(Translator, "translate_ids", timed_ids)
        monkeypatch.setattr(Translator, "translate", timed_text)

    def __call__(self) -> float:
        return self.now


def system_name(options: object) -> str:
    if isinstance(options, RefinementOptions):
        return f"padir T={options.steps} B={options.length_beam}"
    assert isinstance(options, SearchOptions)
    return "ar greedy" if options.beam == 1 else f"ar beam{options.beam}"


def unit(name: str) -> float:
    """Seconds per source token of each system: PaDIR T x B in ms, AR greedy 3 ms, beam5 7 ms."""
    if name.startswith("padir"):
        steps, beams = (int(part.split("=")[1]) for part in name.split()[1:])
        return 0.001 * steps * beams
    return 0.003 if name == "ar greedy" else 0.007


def by_hand(seconds: list[float]) -> Percentiles:
    """Median, p90, p99 (linear interpolation) and mean of three durations, in ms."""
    low, mid, high = sorted(v * 1000 for v in seconds)
    return Percentiles(
        p50_ms=round(mid, 3),
        p90_ms=round(mid + 0.8 * (high - mid), 3),
        p99_ms=round(mid + 0.98 * (high - mid), 3),
        mean_ms=round((low + mid + high) / 3, 3),
    )


def test_statistics_follow_from_known_durations(
    checkpoints: dict[str, Path], word_task_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = WorkClock(monkeypatch)
    result = run_bench(
        checkpoints["ar"],
        checkpoints["padir"],
        word_task_data,
        BenchSettings(
            sentences=3,
            warmup=1,
            threads=1,
            precisions=["fp32"],
            batch_sizes=[1, 2],
            padir_steps=[1, 4],
            length_beams=[1, 5],
        ),
        clock=clock,
    )
    systems = [f"padir T={t} B={b}" for t in (1, 4) for b in (1, 5)] + AR_SYSTEMS
    assert result.systems == tuple(systems) and result.settings.sentences == 3
    latency_calls = [c for c in clock.calls if c[1] is None][len(systems) :]  # after warm-up
    rows = {r.system: r for r in result.results}
    sources = None
    for name in systems:
        mine = [c for c in latency_calls if c[0] == name]
        assert len(mine) == 3 and all(len(c[2]) == 1 for c in mine)
        lengths = [c[2][0] for c in mine]
        assert sources is None or lengths == sources  # the same sentences, in the same order
        sources = lengths
        seconds = [unit(name) * (WorkClock.CALL + n) for n in lengths]
        out_tokens = sum(c[3][0] for c in mine)
        row = rows[name]
        assert row.model == by_hand(seconds)
        assert row.e2e == by_hand([s + WorkClock.TEXT for s in seconds])
        assert row.mean_output_tokens == round(out_tokens / 3, 2)
        # Batch size 1 is the latency pass: 3 sentences in the summed model-only seconds.
        assert row.throughput["1"] == Rates(
            sentences_per_s=round(3 / sum(seconds), 3),
            tokens_per_s=round(out_tokens / sum(seconds), 2),
        )
        # Batch size 2: two calls (2 + 1 sentences), each paying CALL once.
        batched = [c for c in clock.calls if c[0] == name and c[1] == 2]
        assert sorted(len(c[2]) for c in batched) == [1, 2]
        total = unit(name) * (2 * WorkClock.CALL + sum(lengths))
        # PaDIR's padded share: of this system's own passes (the systems share a translator)
        computed, content = (sum(c[5][i] for c in batched) for i in (0, 1))
        assert (computed > 0) == name.startswith("padir")
        assert row.throughput["2"] == Rates(
            sentences_per_s=round(3 / total, 3),
            tokens_per_s=round(sum(sum(c[3]) for c in batched) / total, 2),
            padded_share=round(1 - content / computed, 4) if computed else None,
        )
    assert sources is not None and len(set(sources)) > 1  # percentiles of distinct values
    speedups = {(s.padir, s.ar): s for s in result.speedups}
    assert len(speedups) == 4 * 2
    for (padir, ar), row in speedups.items():
        a, p = rows[ar], rows[padir]
        assert row.model_p50 == round(a.model.p50_ms / p.model.p50_ms, 3)
        assert row.model_p99 == round(a.model.p99_ms / p.model.p99_ms, 3)
        assert row.e2e_p50 == round(a.e2e.p50_ms / p.e2e.p50_ms, 3)
        assert row.e2e_p99 == round(a.e2e.p99_ms / p.e2e.p99_ms, 3)
    # Every call of ar beam5 costs 7/5 of padir T=1 B=5's: exactly 1.4 times slower.
    assert speedups[("padir T=1 B=5", "ar beam5")].model_p50 == round(7 / 5, 3)
    # By length: three shares of one sentence each, shortest source first, the same pairs.
    assert result.by_length is not None
    by_length = {(s.padir, s.ar): s.groups for s in result.by_length}
    assert by_length.keys() == speedups.keys()
    shortest_first = sorted(sources)
    for (padir, ar), groups in by_length.items():
        assert [(g.min_tokens, g.max_tokens, g.sentences) for g in groups] == [
            (n, n, 1) for n in shortest_first
        ]
        for n, group in zip(shortest_first, groups, strict=True):
            slow, fast = unit(ar) * (WorkClock.CALL + n), unit(padir) * (WorkClock.CALL + n)
            assert group.model_p50 == round(slow / fast, 3)
            assert group.e2e_p50 == round((slow + WorkClock.TEXT) / (fast + WorkClock.TEXT), 3)


def test_max_tokens_bounds_the_throughput_rows_decoder_batches(
    checkpoints: dict[str, Path], word_task_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-tokens reaches every throughput batch's translate_ids (not the batch-1 latency
    pass), is recorded in the settings, and is absent from them without it (bench.json's
    bytes unchanged); with --ctranslate2 it is refused, as those rows would not compare."""
    seen: list[tuple[int | None, int | None]] = []
    translate_ids = Translator.translate_ids

    def spy(translator, sources, options, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((kwargs.get("batch_size"), kwargs.get("max_tokens")))
        return translate_ids(translator, sources, options, **kwargs)

    monkeypatch.setattr(Translator, "translate_ids", spy)
    settings = BenchSettings(
        sentences=3,
        warmup=0,
        threads=1,
        precisions=("fp32",),
        batch_sizes=(1, 3),
        padir_steps=(1,),
        length_beams=(1,),
        max_tokens=20,
    )
    result = run_bench(checkpoints["ar"], checkpoints["padir"], word_task_data, settings)
    assert {budget for size, budget in seen if size == 3} == {20}
    assert 20 not in {budget for size, budget in seen if size != 3}  # the latency pass's
    assert result.settings.max_tokens == 20
    assert "decoder batches of 20 padded tokens at most" in format_report(result)
    seen.clear()
    plain = run_bench(
        checkpoints["ar"], checkpoints["padir"], word_task_data, replace(settings, max_tokens=None)
    )
    assert {budget for size, budget in seen if size == 3} == {None}
    assert "max_tokens" not in plain.to_json()["settings"]
    with pytest.raises(GmlmError, match="max_tokens=20 with ctranslate2"):
        replace(settings, ctranslate2=True).validate()


def test_api_with_teacher_and_ar1_returns_the_result_and_renders_markdown(
    checkpoints: dict[str, Path], word_task_data: Path, tmp_path: Path
) -> None:
    json_file = tmp_path / "out" / "bench.json"
    result = run_bench(
        checkpoints["ar"],
        checkpoints["padir"],
        word_task_data,
        BenchSettings(
            sentences=2,
            warmup=0,
            threads=1,
            precisions=["fp32"],
            batch_sizes=[1],
            padir_steps=[4],
            length_beams=[5],
        ),
        teacher=checkpoints["ar"],
        ar1=checkpoints["ar1"],
        json_out=json_file,
    )
    assert BenchResult.read(json_file) == result
    names = [r.system for r in result.results]
    assert names == [
        "padir T=4 B=5",
        *("ar greedy", "ar beam5", "teacher greedy", "teacher beam5", "ar1 greedy", "ar1 beam5"),
    ]
    assert result.settings.checkpoints["ar1"].decoder_layers == 1
    assert result.settings.checkpoints["teacher"].path == str(checkpoints["ar"])
    assert len(result.speedups) == 6
    markdown = render_markdown(result)
    for name in names:
        assert f"| fp32 | {name} |" in markdown
    assert "| fp32 | padir T=4 B=5 | ar1 beam5 |" in markdown
    assert "ar1 greedy" in format_report(result)
    assert "Speed-up by source length" in markdown and "speed-up by source length" in (
        format_report(result)
    )
    # A file written before the bench timed by length reads, and renders without that table.
    older = result.to_json()
    del older["by_length"]
    assert "by source length" not in render_markdown(BenchResult.from_json(older))


@pytest.mark.parametrize(
    ("flag", "role", "kind"), [("--ar", "padir", "ar"), ("--padir", "ar", "padir")]
)
def test_wrong_checkpoint_kind_is_a_clean_error(
    flag: str,
    role: str,
    kind: str,
    checkpoints: dict[str, Path],
    word_task_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = {"--ar": checkpoints["ar"], "--padir": checkpoints["padir"]}
    paths[flag] = checkpoints[role]
    args = ["bench", "--data", str(word_task_data), *FAST]
    assert main([*args, *(x for f, p in paths.items() for x in (f, str(p)))]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {checkpoints[role]}" in err and f"(kind '{kind}')" in err


def test_optional_ar_of_the_wrong_kind_and_bad_settings_are_errors(
    checkpoints: dict[str, Path], word_task_data: Path
) -> None:
    with pytest.raises(GmlmError, match=r"--ar1 .*needs an autoregressive"):
        run_bench(checkpoints["ar"], checkpoints["padir"], word_task_data, ar1=checkpoints["padir"])
    with pytest.raises(GmlmError, match=r"--teacher .*needs an autoregressive"):
        run_bench(
            checkpoints["ar"], checkpoints["padir"], word_task_data, teacher=checkpoints["padir"]
        )
    with pytest.raises(GmlmError, match="precisions"):
        run_bench(
            checkpoints["ar"],
            checkpoints["padir"],
            word_task_data,
            BenchSettings(precisions=["fp16"]),
        )


@pytest.mark.parametrize("flag", ["--output", "--markdown"])
def test_an_unwritable_output_fails_before_any_timing(
    checkpoints: dict[str, Path],
    word_task_data: Path,
    tmp_path: Path,
    flag: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("run_bench ran before the output path was checked")

    monkeypatch.setattr("gmlm.bench.run_bench", never)
    args = ["bench", "--ar", str(checkpoints["ar"]), "--padir", str(checkpoints["padir"])]
    args += ["--data", str(word_task_data), flag, str(tmp_path)]  # a folder, not a file
    assert main(args) != 0
    assert f"{flag} {tmp_path} is a folder" in capsys.readouterr().err


def test_padir_decoding_flags_reach_every_padir_system(
    checkpoints: dict[str, Path],
    word_task_data: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gmlm bench --prune-after 0 --selection sum`: every PaDIR system decodes with those
    settings on top of its swept T and B, the AR systems are untouched, and the settings
    line says what PaDIR ran with."""
    seen: list[RefinementOptions | SearchOptions] = []
    real_translate_ids = Translator.translate_ids

    def recording(translator, sources, options, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(options)
        return real_translate_ids(translator, sources, options, **kwargs)

    monkeypatch.setattr(Translator, "translate_ids", recording)
    args = ["bench", "--ar", str(checkpoints["ar"]), "--padir", str(checkpoints["padir"])]
    args += ["--data", str(word_task_data), "--sentences", "2", "--warmup", "0"]
    args += ["--threads", "1", "--precision", "fp32", "--batch-sizes", "1", "--steps", "2,3"]
    args += ["--length-beams", "2", "--prune-after", "0", "--selection", "sum", "--json"]
    assert main(args) == 0
    padir = [o for o in seen if isinstance(o, RefinementOptions)]
    assert {(o.steps, o.length_beam) for o in padir} == {(2, 2), (3, 2)}
    assert all(o.prune_after == 0 and o.selection == "sum" for o in padir)
    assert any(isinstance(o, SearchOptions) for o in seen)
    settings = json.loads(capsys.readouterr().out.splitlines()[-1])["settings"]
    assert settings["padir_decoding"].startswith("pruning none; length shift 0; selection sum")
    with pytest.raises(GmlmError, match="steps is swept"):
        run_bench(
            checkpoints["ar"], checkpoints["padir"], word_task_data, padir_options={"steps": 2}
        )
