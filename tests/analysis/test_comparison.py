"""Checkpoints compared on a validation split (`gmlm analyze compare`): every row equals `gmlm
translate` of its checkpoint with the flags of its kind, the p-values equal the `sacrebleu`
command's paired bootstrap, and bad input fails before any decoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gmlm
from gmlm.analysis.comparison import compare_checkpoints, render_comparison_markdown
from gmlm.analysis.results import ComparisonResult
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores
from tests.helpers.cli import exit_status

pytestmark = pytest.mark.usefixtures("one_thread")


def test_cli_rows_equal_translate_and_sacrebleu(
    padir_run: Path,
    ar_checkpoint: Path,
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "compare.json"
    args = ["analyze", "compare", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    args += ["--against", str(ar_checkpoint), "--against", str(padir_run)]
    flags = ["--sentences", "16", "--steps", "2", "--beam", "2", "--batch-size", "8"]
    assert main([*args, *flags, "--device", "cpu", "--json", "--output", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert ComparisonResult.read(out).to_json() == result
    assert result["split"] == "valid" and result["sentences"] == 16
    rows = result["rows"]
    assert [(r["checkpoint"], r["kind"]) for r in rows] == [
        (str(padir_run), "padir"),
        (str(ar_checkpoint), "ar"),
        (str(padir_run), "padir"),
    ]
    assert rows[0]["decoding"]["steps"] == 2 and rows[1]["decoding"]["beam"] == 2
    # The same checkpoint again: its translations are the first row's, so not tested.
    assert rows[2]["same_output"] and rows[2]["p_value"] is None and rows[2]["bleu_delta"] == 0

    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("valid", "src")[:16]
    references = prepared.read_text("valid", "tgt")[:16]
    files = []
    for row, path, settings in (
        (rows[0], padir_run, {"steps": 2}),
        (rows[1], ar_checkpoint, {"beam": 2}),
    ):
        hyps = gmlm.load(path, device="cpu").translate(sources, batch_size=8, **settings)
        scores = corpus_scores(hyps, references)
        assert row["bleu"] == round(scores["bleu"].score, 2), row
        assert row["chrf"] == round(scores["chrf"].score, 2), row
        files.append(tmp_path / f"{row['kind']}.txt")
        files[-1].write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    assert rows[1]["bleu_delta"] == round(rows[1]["bleu"] - rows[0]["bleu"], 2)
    assert not rows[1]["same_output"]

    # The p-value is the sacrebleu command's paired bootstrap (same seed, 1,000 resamples).
    reference = tmp_path / "ref.txt"
    reference.write_text("".join(r + "\n" for r in references), encoding="utf-8")
    command = [sys.executable, "-m", "sacrebleu", str(reference), "-i", *map(str, files)]
    command += ["-m", "bleu", "--paired-bs", "-f", "json"]
    printed = json.loads(subprocess.run(command, capture_output=True, check=True).stdout)
    assert rows[1]["p_value"] == printed[1]["BLEU"]["p_value"]
    assert "bs:1000|seed:12345" in result["settings"]["bootstrap"]

    text = render_comparison_markdown(ComparisonResult.read(out))
    assert text.count("\n| ") == 1 + 3  # the header and 3 rows
    assert "16 pairs of split 'valid'" in text and "| same output |" in text


def test_bad_input_is_a_clean_error_before_decoding(
    padir_run: Path,
    ar_checkpoint: Path,
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_decoding: None,
) -> None:
    data = word_task_data
    cases = {
        "two checkpoints or more, got 1": dict(checkpoints=[padir_run]),
        "decoding settings for autoregressive checkpoints (beam=2), but none is compared": dict(
            checkpoints=[padir_run, padir_run], decoding={"ar": {"beam": 2}}
        ),
        "length_beam=100000 must be between 1": dict(
            checkpoints=[ar_checkpoint, padir_run], decoding={"padir": {"length_beam": 100000}}
        ),
        "no split 'dev'": dict(checkpoints=[padir_run, ar_checkpoint], split="dev"),
        "checkpoint not found": dict(checkpoints=[padir_run, tmp_path / "missing"]),
    }
    for message, kwargs in cases.items():
        with pytest.raises(GmlmError, match=message.replace("(", r"\(").replace(")", r"\)")):
            compare_checkpoints(data=data, device="cpu", **kwargs)  # type: ignore[arg-type]
    args = ["analyze", "compare", "--checkpoint", str(padir_run), "--data", str(data)]
    for extra, message in (
        ([], "--against: give at least one checkpoint"),
        (["--against", str(padir_run), "--sentences", "-1"], "--sentences"),
        (["--against", str(padir_run), "--output", str(padir_run)], "--output"),
    ):
        assert exit_status([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
