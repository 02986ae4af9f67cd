"""The decoding ablation on a tiny trained PaDIR checkpoint: every row equals `gmlm translate`
with its settings, the p-values equal the `sacrebleu` command's paired bootstrap, and bad
variants fail before any decoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gmlm
from gmlm.analysis.ablation import decoding_ablation, render_ablation_markdown
from gmlm.analysis.results import AblationResult
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores

VARIANTS = ["selection=sum", "length_beam=1 length_offsets=[-1,1]", "prune_after=0"]


def test_cli_rows_equal_translate_and_sacrebleu(
    padir_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ablation.json"
    args = ["analyze", "ablation", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    flags = ["--sentences", "24", "--steps", "2", "--length-beam", "3", "--batch-size", "8"]
    for variant in VARIANTS:
        flags += ["--variant", variant]
    assert main([*args, *flags, "--device", "cpu", "--json", "--output", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "valid" and result["sentences"] == 24
    assert [r["variant"] for r in result["rows"]] == ["default", *VARIANTS]
    assert result["rows"][1]["settings"] == {"selection": "sum"}
    assert result["rows"][2]["settings"] == {"length_beam": 1, "length_offsets": [-1, 1]}
    assert AblationResult.read(out).to_json() == result

    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("valid", "src")[:24]
    references = prepared.read_text("valid", "tgt")[:24]
    translator = gmlm.load(padir_run, device="cpu")
    changes = [{}, {"selection": "sum"}, {"length_beam": 1, "length_offsets": (-1, 1)}]
    changes.append({"prune_after": 0})
    files, outputs = [], []
    for i, (row, change) in enumerate(zip(result["rows"], changes, strict=True)):
        settings = {"steps": 2, "length_beam": 3, **change}
        hyps = translator.translate(sources, batch_size=8, **settings)
        scores = corpus_scores(hyps, references)
        assert row["bleu"] == round(scores["bleu"].score, 2), row
        assert row["chrf"] == round(scores["chrf"].score, 2), row
        assert row["bleu_delta"] == round(row["bleu"] - result["rows"][0]["bleu"], 2)
        assert row["same_output"] == (i > 0 and hyps == outputs[0])
        outputs.append(hyps)
        path = tmp_path / f"hyp{i}.txt"
        path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        files.append(str(path))
    assert result["rows"][0]["p_value"] is None
    assert not all(row["same_output"] for row in result["rows"][1:])

    # The p-values are those of the sacrebleu command's paired bootstrap (same seed, 1,000
    # resamples), an independent path to the same test.
    reference = tmp_path / "ref.txt"
    reference.write_text("".join(r + "\n" for r in references), encoding="utf-8")
    command = [sys.executable, "-m", "sacrebleu", str(reference), "-i", *files]
    command += ["-m", "bleu", "--paired-bs", "-f", "json"]
    printed = json.loads(subprocess.run(command, capture_output=True, check=True).stdout)
    expected = [
        None if r["same_output"] else s["BLEU"]["p_value"]
        for s, r in zip(printed, result["rows"], strict=True)
    ]
    assert expected == [r["p_value"] for r in result["rows"]]
    assert "bs:1000|seed:12345" in result["settings"]["bootstrap"]


def test_markdown_says_which_row_is_best(padir_run: Path, word_task_data: Path) -> None:
    result = decoding_ablation(
        padir_run,
        word_task_data,
        variants=("selection=sum", "steps=1", "selection=mean"),
        sentences=12,
        device="cpu",
        steps=2,
        length_beam=2,
    )
    text = render_ablation_markdown(result)
    assert text.count("\n| ") == 1 + 4  # the header and 4 rows
    # selection=mean is the default's: the same translations, not tested against themselves.
    same = result.rows[3]
    assert same.same_output and same.p_value is None and same.bleu_delta == 0.0
    assert "| selection=mean | " in text and "| same output |" in text
    best = max(result.rows, key=lambda r: r.quality.bleu)
    if best.quality.bleu == result.rows[0].quality.bleu:
        assert "The default decoding scores highest on 'valid'." in text
    else:
        assert f"`{best.variant}` scores highest on 'valid'" in text
    assert "12 pairs of split 'valid' (the first of" in text
    assert result.settings.decoding["steps"] == 2 and "return_steps" not in result.settings.decoding


def test_bad_input_is_a_clean_error_before_decoding(
    padir_run: Path,
    ar_checkpoint: Path,
    word_task_data: Path,
    capsys: pytest.CaptureFixture[str],
    no_decoding: None,
) -> None:
    with pytest.raises(GmlmError, match="kind 'padir'"):
        decoding_ablation(ar_checkpoint, word_task_data, device="cpu")
    with pytest.raises(GmlmError, match="unknown config key 'sellection'"):
        decoding_ablation(padir_run, word_task_data, variants=("sellection=sum",), device="cpu")
    # Within the types but beyond the model's limits: caught before the first row decodes.
    with pytest.raises(GmlmError, match="length_beam=100000 must be between 1"):
        decoding_ablation(padir_run, word_task_data, variants=("length_beam=100000",), device="cpu")
    with pytest.raises(GmlmError, match="no split 'dev'"):
        decoding_ablation(padir_run, word_task_data, "dev", variants=("steps=1",), device="cpu")
    args = ["analyze", "ablation", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    assert main([*args, "--variant", "selection=best"]) == 2  # before any decoding
    assert "'best' is not one of ['sum', 'mean', 'changed']" in capsys.readouterr().err


def test_variants_parse_to_typed_settings() -> None:
    from gmlm.decoding.options import ABLATION_VARIANTS, parse_variant

    assert parse_variant("length_beam=1 length_offsets=[-2,-1,1,2]") == {
        "length_beam": 1,
        "length_offsets": (-2, -1, 1, 2),
    }
    assert parse_variant("dedup=false") == {"dedup": False}
    assert all(parse_variant(v) for v in ABLATION_VARIANTS)
    for text, message in (
        ("  ", "is empty"),
        ("steps=1 steps=2", "steps is set twice"),
        ("model.steps=1", "have no sections"),
        ("steps", "not of the form key=value"),
        ("steps=x", "steps: expected an integer, got 'x'"),
    ):
        with pytest.raises(GmlmError, match=message):
            parse_variant(text)
