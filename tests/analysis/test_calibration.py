"""Length calibration and a checkpoint's own decoding defaults (decoding.json), on the tiny
trained PaDIR run and an untrained AR checkpoint: every grid row equals `gmlm translate` with
that value scored by SacreBLEU, the choice follows the margin rule, and the choice reaches
`gmlm.load`, `gmlm translate` and `gmlm export`, with explicit settings still winning."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.analysis.calibration import calibrate, choose, render_calibration_markdown
from gmlm.analysis.results import Calibration, CalibrationRow
from gmlm.checkpoint.decoding_defaults import DECODING_FILE, write_decoding_defaults
from gmlm.checkpoint.export import export_checkpoint
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.decoding import RefinementOptions, refinement_init
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = 16


def own_copy(run: Path, tmp_path: Path) -> Path:
    """A copy of the run's checkpoint, so that writing decoding.json leaves the shared
    session fixture alone."""
    folder = tmp_path / "checkpoint"
    shutil.copytree(resolve_checkpoint(run), folder)
    return folder


def row(value: float, bleu: float) -> CalibrationRow:
    return CalibrationRow(value=value, bleu=bleu, length_ratio=1.0, seconds=0.0)


def test_choose_keeps_the_default_unless_the_best_beats_it_by_the_margin() -> None:
    rows = [row(-1, 30.0), row(0, 31.0), row(1, 31.2), row(2, 31.25)]
    assert choose(rows, 0, 0.2) == 2  # +0.25
    assert choose(rows, 0, 0.25) == 0  # not more than the margin
    assert choose(rows, 1, 0.0) == 2
    assert choose([row(0, 5.0), row(1, 5.0)], 1, 0.0) == 1  # a tie is no gain
    assert choose([row(0, 1.0)], 0, 0.2) == 0


def test_length_shift_moves_predicted_lengths_only(padir_run: Path) -> None:
    model = gmlm.load(padir_run, device="cpu").model
    src = torch.tensor([[10, 11, 12, 3], [13, 14, 3, 0]])
    plain = refinement_init(model, src, RefinementOptions(length_beam=3))  # type: ignore[arg-type]
    shifted = refinement_init(
        model,  # type: ignore[arg-type]
        src,
        RefinementOptions(length_beam=3, length_shift=2),
    )
    assert torch.equal(shifted.lengths, plain.lengths + 2)
    given = torch.tensor([[4], [6]])
    oracle = refinement_init(
        model,  # type: ignore[arg-type]
        src,
        RefinementOptions(length_beam=1, length_shift=2),
        lengths=given,
    )
    assert oracle.lengths.tolist() == [4, 6]  # given lengths are decoded as given


def test_padir_grid_rows_equal_translate_and_the_choice_reaches_every_user(
    padir_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = own_copy(padir_run, tmp_path)
    result = calibrate(
        folder,
        word_task_data,
        "valid",
        setting="length_shift",
        values=(1, -1),  # the default 0 is added
        sentences=SENTENCES,
        batch_size=8,
        device="cpu",
        progress=False,
        min_gain=0.0,
    )
    assert [r.value for r in result.rows] == [1, -1, 0]
    assert (result.default, result.sentences, result.split) == (0, SENTENCES, "valid")
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("valid", "src")[:SENTENCES]
    references = prepared.read_text("valid", "tgt")[:SENTENCES]
    translator = gmlm.load(padir_run, device="cpu")  # the fixture: no decoding.json
    assert translator.defaults == {}
    bleu = {}
    for r in result.rows:
        hyps = translator.translate(sources, batch_size=8, length_shift=r.value)
        bleu[r.value] = round(corpus_scores(hyps, references)["bleu"].score, 2)
        assert r.bleu == bleu[r.value], r
    assert result.chosen == choose(result.rows, 0, 0.0)
    assert Calibration.from_json(json.loads(json.dumps(result.to_json()))) == result
    table = render_calibration_markdown(result)
    assert "| 0 (default)" in table and "**chosen**" in table

    # The choice is the checkpoint's decoding default now; explicit settings still win.
    written = folder / DECODING_FILE
    if result.chosen == 0:  # this tiny model's luck: record a choice by hand to go on
        write_decoding_defaults(folder, {"length_shift": 1}, "by hand, for the test")
    else:
        assert json.loads(written.read_text())["chosen_on"] == result.summary()
    shift = json.loads(written.read_text())["settings"]["length_shift"]
    loaded = gmlm.load(folder, device="cpu")
    assert loaded.defaults == {"length_shift": shift}
    assert loaded.options().length_shift == shift  # type: ignore[union-attr]
    assert loaded.options(length_shift=0).length_shift == 0  # type: ignore[union-attr]
    # An options object keeps it too, where it leaves the class default (issue 37).
    assert loaded.options(RefinementOptions()).length_shift == shift  # type: ignore[union-attr]
    stepped = loaded.options(RefinementOptions(steps=2, length_shift=3))
    assert (stepped.steps, stepped.length_shift) == (2, 3)  # type: ignore[union-attr]
    expected = translator.translate(sources, batch_size=8, length_shift=shift)
    assert loaded.translate(sources, batch_size=8) == expected
    assert loaded.translate(sources, RefinementOptions(), batch_size=8) == expected

    # gmlm translate uses it and says so; gmlm export carries it.
    source_file = tmp_path / "src.txt"
    source_file.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    out = tmp_path / "hyp.txt"
    args = ["translate", "--checkpoint", str(folder), "--input", str(source_file)]
    assert main([*args, "--output", str(out), "--device", "cpu", "--batch-size", "8"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == expected
    err = capsys.readouterr().err
    assert f"decoding defaults (decoding.json): length_shift={shift}" in err
    # ... and what the checkpoint translates, as its training wrote it in meta.json.
    assert f"{folder}: padir model, languages de-en, as its meta.json records" in err
    # So does gmlm analyze's default row (its flags override decoding.json, as translate's do).
    ablation = ["analyze", "ablation", "--checkpoint", str(folder), "--data", str(word_task_data)]
    ablation += ["--sentences", str(SENTENCES), "--batch-size", "8", "--device", "cpu"]
    assert main([*ablation, "--variant", "length_shift=0", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["bleu"] == round(corpus_scores(expected, references)["bleu"].score, 2)
    plain = translator.translate(sources, batch_size=8)
    assert rows[1]["bleu"] == round(corpus_scores(plain, references)["bleu"].score, 2)
    exported = export_checkpoint(folder, tmp_path / "exported", torch.bfloat16)
    assert (exported / DECODING_FILE).read_text() == written.read_text()
    assert gmlm.load(exported, device="cpu").defaults == {"length_shift": shift}

    # A grid that gains nothing over the recorded choice keeps it, and says so.
    recorded = written.read_bytes()
    again = calibrate(
        folder,
        word_task_data,
        setting="length_shift",
        values=(0,),
        sentences=4,
        device="cpu",
        progress=False,
        min_gain=100.0,
    )
    assert (again.previous, again.chosen) == (shift, shift)
    assert [r.value for r in again.rows] == [0, shift]
    assert again.decision == (
        f"kept length_shift={shift} of {written}: no value beats it by more than 100 BLEU"
    )
    assert written.read_bytes() == recorded


def test_a_recorded_choice_is_replaced_only_by_a_better_one_and_never_silently(
    padir_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows decode as the checkpoint does (decoding.json's other settings included);
    the value to beat is the recorded one; a better value replaces it beside the file's other
    settings, and the command says what it did: recorded / replaced / kept / nothing."""
    folder = own_copy(padir_run, tmp_path)
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("valid", "src")[:SENTENCES]
    references = prepared.read_text("valid", "tgt")[:SENTENCES]
    translator = gmlm.load(folder, device="cpu")
    bleu = {
        v: round(
            corpus_scores(
                translator.translate(sources, batch_size=8, steps=2, length_shift=v), references
            )["bleu"].score,
            2,
        )
        for v in (-2, 0, 2)
    }
    worst, best = min(bleu, key=bleu.__getitem__), max(bleu, key=bleu.__getitem__)
    assert bleu[best] > bleu[worst]
    written = folder / DECODING_FILE
    write_decoding_defaults(folder, {"length_shift": worst, "steps": 2}, "by hand")
    result = calibrate(
        folder,
        word_task_data,
        setting="length_shift",
        values=(-2, 0, 2),
        sentences=SENTENCES,
        batch_size=8,
        device="cpu",
        progress=False,
        min_gain=0.0,
    )
    assert {r.value: r.bleu for r in result.rows} == bleu  # decoded with steps=2
    assert (result.previous, result.chosen) == (worst, best)
    assert json.loads(written.read_text())["settings"] == {"length_shift": best, "steps": 2}
    assert result.decision == (
        f"replaced length_shift={worst} by {best} in {written} "
        f"({bleu[best] - bleu[worst]:+.2f} BLEU over it)"
    )
    assert "the value recorded before" in json.loads(written.read_text())["chosen_on"]

    # A first choice is recorded, a grid without gain records nothing; the command says so.
    written.unlink()
    args = ["analyze", "calibrate", "--checkpoint", str(folder), "--data", str(word_task_data)]
    args += ["--sentences", str(SENTENCES), "--batch-size", "8", "--device", "cpu"]
    args += ["--no-progress", "--values=-2,0,2"]
    assert main([*args, "--min-gain", "100"]) == 0
    assert not written.exists()
    assert (
        "decoding.json: nothing to record: no length_shift beats the class default (0) by more "
        "than 100 BLEU." in capsys.readouterr().out
    )
    assert main([*args, "--min-gain", "0", "--dry-run"]) == 0
    assert not written.exists()
    assert f"dry run, {written} left as it is; a run would have: " in capsys.readouterr().out


def test_ar_length_penalty_and_the_cli(
    ar_checkpoint: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = own_copy(ar_checkpoint, tmp_path)
    out = tmp_path / "calibration.json"
    args = ["analyze", "calibrate", "--checkpoint", str(folder), "--data", str(word_task_data)]
    flags = ["--sentences", "6", "--values", "1,2.5", "--beam", "2", "--min-gain", "0"]
    assert main([*args, *flags, "--device", "cpu", "--no-progress", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["setting"] == "length_penalty" and result["decoding"] == {"beam": 2}
    assert [r["value"] for r in result["rows"]] == [1, 2.5, 0.6]
    translator = gmlm.load(ar_checkpoint, device="cpu")
    prepared = load_dataset(word_task_data)
    sources = prepared.read_text("valid", "src")[:6]
    references = prepared.read_text("valid", "tgt")[:6]
    for r in result["rows"]:
        hyps = translator.translate(sources, beam=2, length_penalty=r["value"])
        assert r["bleu"] == round(corpus_scores(hyps, references)["bleu"].score, 2)
    written = (folder / DECODING_FILE).is_file()
    assert written == (result["chosen"] != 0.6)
    # --dry-run leaves decoding.json as it is; --output writes the JSON.
    (folder / DECODING_FILE).unlink(missing_ok=True)
    dry = [*args, *flags, "--device", "cpu", "--no-progress", "--dry-run", "--output", str(out)]
    assert main(dry) == 0
    assert not (folder / DECODING_FILE).exists()
    assert Calibration.read(out).setting == "length_penalty"
    assert "| 0.6 (default)" in capsys.readouterr().out


def test_bad_settings_fail_before_decoding(ar_checkpoint: Path, word_task_data: Path) -> None:
    with pytest.raises(GmlmError, match=r"setting 'steps'.*length_penalty"):
        calibrate(ar_checkpoint, word_task_data, setting="steps", values=(1, 2), device="cpu")
    with pytest.raises(GmlmError, match=r"beam=0 must be between 1 and 1000"):
        calibrate(
            ar_checkpoint,
            word_task_data,
            setting="length_penalty",
            values=(0.6,),
            decoding={"beam": 0},
            device="cpu",
        )
    with pytest.raises(GmlmError, match=r"length_penalty=-1 must be >= 0 \(0 disables it\)"):
        calibrate(
            ar_checkpoint, word_task_data, setting="length_penalty", values=(-1.0,), device="cpu"
        )
    for value in (math.nan, math.inf):  # NaN would pass every comparison
        with pytest.raises(GmlmError, match=rf"length_penalty={value}: expected a finite number"):
            calibrate(
                ar_checkpoint,
                word_task_data,
                setting="length_penalty",
                values=(value,),
                device="cpu",
            )
    with pytest.raises(GmlmError, match=r"^min_gain=nan: expected a finite number"):
        calibrate(
            ar_checkpoint,
            word_task_data,
            setting="length_penalty",
            values=(0.6,),
            min_gain=math.nan,
            device="cpu",
        )
    assert (
        main(
            [
                "analyze",
                "calibrate",
                "--checkpoint",
                str(ar_checkpoint),
                "--data",
                str(word_task_data),
                "--setting",
                "beam",
            ]
        )
        == 2
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"settings": {"length_shift": 1}, "chosen_on": "x"}',
            r"length_shift only applies to "
            r"a PaDIR model",
        ),
        ('{"settings": {"bogus": 1}, "chosen_on": "x"}', r"unknown decoding setting bogus"),
        ('{"settings": {"beam": "five"}, "chosen_on": "x"}', r"beam"),
        ('{"settings": {}}', r"chosen_on"),
        ("not json", r"decoding.json"),
    ],
)
def test_a_bad_decoding_json_fails_at_load_naming_the_file(
    ar_checkpoint: Path, tmp_path: Path, content: str, message: str
) -> None:
    folder = own_copy(ar_checkpoint, tmp_path)
    (folder / DECODING_FILE).write_text(content, encoding="utf-8")
    with pytest.raises(GmlmError, match=message) as caught:
        gmlm.load(folder, device="cpu")
    assert DECODING_FILE in str(caught.value)


def test_values_keep_ints_as_ints() -> None:
    from gmlm.cli.analyze import number_list

    values = number_list("-1, 0,2,0.5")
    assert values == (-1, 0, 2, 0.5)
    assert [type(v) for v in values] == [int, int, int, float]
