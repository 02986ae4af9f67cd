"""The length analysis on a tiny trained PaDIR checkpoint: its decoding rows agree with
`gmlm translate`, its predictor statistics with a sentence-by-sentence recomputation."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.analysis.length import length_analysis, render_length_markdown
from gmlm.analysis.results import LengthResult
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import refine
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores
from gmlm.evaluation.summary import quality_row
from gmlm.models import PadirModel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_cli_rows_equal_translate(
    padir_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "length.json"
    args = ["analyze", "length", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    flags = ["--sentences", "16", "--steps", "2", "--length-beam", "3", "--batch-size", "8"]
    assert main([*args, *flags, "--length-weights", "0,1", "--device", "cpu", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sentences"]["analysed"] == 16
    names = [r["decoding"] for r in result["decoding"]]
    assert names == [
        "predicted length (B=1)",
        "top 3 predicted lengths, weight 0",
        "top 3 predicted lengths, weight 1",
        "reference length (oracle)",
    ]
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("test", "src")[:16]
    references = prepared.read_text("test", "tgt")[:16]
    translator = gmlm.load(padir_run, device="cpu")
    for row, beam, weight in zip(result["decoding"][:3], (1, 3, 3), (0.0, 0.0, 1.0), strict=True):
        hyps = translator.translate(
            sources, steps=2, length_beam=beam, length_score_weight=weight, batch_size=8
        )
        scores = corpus_scores(hyps, references)
        assert row["bleu"] == round(scores["bleu"].score, 2), row
        assert row["chrf"] == round(scores["chrf"].score, 2), row
        assert row["length_ratio"] == round(scores["bleu"].length_ratio or 0.0, 3), row
    for row in result["decoding"][1:3]:
        assert 0.0 <= row["chosen_is_reference_length"] <= 1.0
    assert "chosen_is_reference_length" not in result["decoding"][0]

    # Markdown output and --out.
    assert main([*args, *flags, "--device", "cpu", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| top-1 = reference length |" in text and "| reference length (oracle) |" in text
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["analysis"] == "length"
    read = LengthResult.read(out)
    assert read.to_json() == written
    # The base decoding options, less the field each configuration sets itself.
    assert read.settings.decoding is not None and read.settings.decoding["steps"] == 2
    assert read.settings.decoding["length_beam"] == 3
    assert "length_score_weight" not in read.settings.decoding


def test_predictor_statistics_match_a_per_sentence_recomputation(
    padir_run: Path, word_task_data: Path
) -> None:
    result = length_analysis(
        padir_run, word_task_data, sentences=12, steps=1, length_beam=2, device="cpu"
    )
    translator = gmlm.load(padir_run, device="cpu")
    model = translator.model
    assert isinstance(model, PadirModel)
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("test", "src")[:12]
    references = prepared.read_text("test", "tgt")[:12]
    errors, ranks = [], []
    with torch.no_grad():
        for source, reference in zip(sources, references, strict=True):
            src = translator.source_tensor([translator.tokenizer.encode(source)])
            logits = model.length_logits(model.encode(src))[0]
            target = len(translator.tokenizer.encode(reference)) + 1
            errors.append(int(logits.argmax()) + 1 - target)
            ranks.append(int((logits > logits[target - 1]).sum()) + 1)
    p = result.predictor
    assert p.top1_exact == pytest.approx(sum(e == 0 for e in errors) / 12, abs=1e-4)
    assert p.top1_within_1 == pytest.approx(sum(abs(e) <= 1 for e in errors) / 12, abs=1e-4)
    assert p.top1_mean_signed_error == pytest.approx(sum(errors) / 12, abs=1e-3)
    assert p.length_beam == 2
    assert p.reference_in_top == pytest.approx(sum(r <= 2 for r in ranks) / 12, abs=1e-4)
    assert result.to_json()["predictor"]["reference_in_top_2"] == p.reference_in_top
    assert p.reference_mean_rank == pytest.approx(sum(ranks) / 12, abs=1e-3)
    assert "reference length (oracle)" in render_length_markdown(result)


def test_the_oracle_row_decodes_the_reference_lengths(
    padir_run: Path, word_task_data: Path
) -> None:
    """The oracle row is the quality of decoding each pair at its reference length (pieces +
    EOS), one candidate: recomputed here sentence by sentence (batch 1 on both sides, so the
    same float rounding). padir_run predicts one length for every sentence, whose references
    differ in length, so the oracle row and the predicted-length row differ."""
    result = length_analysis(
        padir_run, word_task_data, sentences=12, steps=2, length_beam=2, batch_size=1, device="cpu"
    )
    translator = gmlm.load(padir_run, device="cpu")
    model = translator.model
    assert isinstance(model, PadirModel)
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("test", "src")[:12]
    references = prepared.read_text("test", "tgt")[:12]
    options = translator.options(steps=2, length_beam=1)
    assert isinstance(options, RefinementOptions)
    hypotheses = []
    with torch.no_grad():
        for source, reference in zip(sources, references, strict=True):
            src = translator.source_tensor([translator.tokenizer.encode(source)])
            length = torch.tensor([[len(translator.tokenizer.encode(reference)) + 1]])
            (refined,) = refine(model, src, options, 0, length)
            assert refined.length == int(length)
            hypotheses.append(translator.text(refined.tokens))
    rows = {row.decoding: row for row in result.decoding}
    oracle = rows["reference length (oracle)"]
    assert oracle.oracle and result.sentences.analysed == 12
    expected, _ = quality_row(hypotheses, references, result.settings.tokenize)
    assert oracle.quality == expected
    assert oracle.quality != rows["predicted length (B=1)"].quality


def test_bad_input_is_a_clean_error(
    padir_run: Path,
    ar_checkpoint: Path,
    word_task_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(GmlmError, match="kind 'padir'"):
        length_analysis(ar_checkpoint, word_task_data, device="cpu")
    with pytest.raises(GmlmError, match="sentences=0 must be between 1 and"):
        length_analysis(padir_run, word_task_data, sentences=0, device="cpu")
    with pytest.raises(GmlmError, match="at least one weight"):
        length_analysis(padir_run, word_task_data, length_weights=(), device="cpu")
    args = ["analyze", "length", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--length-weights", "a,b"])
    assert exit_info.value.code == 2
    assert "expected comma-separated numbers, e.g. 0,0.5" in capsys.readouterr().err


def test_cli_output_is_checked_before_the_work_and_a_full_disk_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = LengthResult.read(FIXTURES / "length.json")
    runs: list[dict[str, object]] = []

    def analysis(**settings: object) -> LengthResult:  # the work, done
        runs.append(settings)
        return result

    monkeypatch.setattr("gmlm.analysis.length.length_analysis", analysis)
    checkpoint = tmp_path / "padir"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"")
    data = tmp_path / "data"
    args = ["analyze", "length", "--checkpoint", str(checkpoint), "--data", str(data)]
    refused = {
        tmp_path: "is a folder; give a file path",
        checkpoint / "length.json": "lies inside --checkpoint",
        data / "length.json": "lies inside --data",
    }
    if Path("/proc/self").is_dir():  # Linux: no one, root included, creates files in /proc
        refused[Path("/proc/gmlm-length.json")] = "cannot create files in /proc"
    for output, message in refused.items():
        assert main([*args, "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gmlm: error: --output {output}") and message in err
    assert runs == []  # refused before the work
    if Path("/dev/full").exists():  # the disk fills at the end: still one line
        assert main([*args, "--output", "/dev/full"]) == 2
        err = capsys.readouterr().err
        assert err == (
            "gmlm: error: cannot write /dev/full: No space left on device; free some space or "
            "choose another path\n"
        )
    assert main([*args, "--output", str(tmp_path / "length.json.gz"), "--json"]) == 0
    with gzip.open(tmp_path / "length.json.gz", "rt", encoding="utf-8") as handle:
        assert json.load(handle) == result.to_json()


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_a_text_file_shorter_than_its_rows_is_a_clean_error(
    side: str,
    padir_run: Path,
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A damaged prepared dataset: a text file cut short, its binarized rows intact.
    data = tmp_path / "data"
    shutil.copytree(word_task_data, data)
    text = data / f"test.{side}.txt"
    text.write_text("".join(text.read_text().splitlines(keepends=True)[:10]))
    args = ["analyze", "length", "--checkpoint", str(padir_run), "--data", str(data)]
    assert main([*args, "--sentences", "20", "--json"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gmlm: error: {text}: 10 lines, the manifest says ")
    assert line.endswith("damaged; prepare it again with `gmlm data prepare --force`")
