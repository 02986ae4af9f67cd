"""`gmlm analyze table1` on tiny checkpoints that memorised the first test pairs of a tiny
corpus, written out as a Multi30k test set: the table's rows and column groups, its scores
equal to `gmlm translate` then `gmlm evaluate`, the command it records, and the errors that
stop it before any translation."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from gmlm.analysis.results import Table1Result
from gmlm.analysis.settings import Table1Settings
from gmlm.analysis.table1 import plan_direction
from gmlm.cli.main import build_parser, main
from gmlm.cli.options import settings_from_args
from gmlm.data.binarized import load_dataset
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.corpora import write_lines

pytestmark = pytest.mark.usefixtures("one_thread")

LINES = 40  # in the test files; the learned checkpoints know the first 32 pairs
SCORED = 36  # --sentences: 32 known pairs and 4 unseen


def multi30k_test_set(folder: Path, data: Path, *, target_lines: int = LINES) -> Path:
    """The first test pairs of the prepared dataset `data` as a Multi30k folder: German
    sources gzipped, English references plain (the reader takes both)."""
    prepared = load_dataset(data)
    folder.mkdir(parents=True)
    write_lines(folder / "test_2016_flickr.de.gz", prepared.read_text("test", "src")[:LINES])
    write_lines(folder / "test_2016_flickr.en", prepared.read_text("test", "tgt")[:target_lines])
    return folder


def test_two_directions_give_the_papers_rows_and_scores_equal_to_translate_and_evaluate(
    learned_checkpoints: dict[str, Path],
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = learned_checkpoints["ar"].parent  # holds ar/ and padir/
    assert learned_checkpoints["padir"] == folder / "padir"
    multi30k = multi30k_test_set(tmp_path / "multi30k", word_task_data)
    out, md = tmp_path / "out" / "table1.json", tmp_path / "out" / "table1.md"
    flags = ["--direction", f"de-en={folder}", "--direction", f"en-de={folder}"]
    flags += ["--multi30k", str(multi30k), "--sentences", str(SCORED)]
    argv = ["analyze", "table1", *flags, "--device", "cpu", "--output", str(out)]
    assert main([*argv, "--markdown", str(md)]) == 0
    printed = capsys.readouterr()
    assert printed.out == md.read_text(encoding="utf-8")
    progress = [line for line in printed.err.splitlines() if "BLEU" in line]
    assert len(progress) == 6 and progress[0].startswith("table1: de-en AR, beam 5: BLEU")

    lines = printed.out.splitlines()
    assert lines[2] == (
        "| model | steps | # hyp. | DE->EN BLEU | DE->EN chrF | paper WMT14 DE->EN BLEU "
        "| EN->DE BLEU | EN->DE chrF | paper WMT14 EN->DE BLEU |"
    )
    rows = [line.strip("| ").split(" | ") for line in lines[4:7]]
    assert [row[:3] for row in rows] == [
        ["AR, beam 5", "N", "5"],
        ["PaDIR T=4 B=5", "4", "5"],
        ["PaDIR T=10 B=5", "10", "5"],
    ]
    assert [(row[5], row[8]) for row in rows] == [
        ("33.50", "29.54"),
        ("33.49", "28.61"),
        ("33.63", "28.58"),
    ]

    result = Table1Result.read(out)
    assert [d.direction for d in result.directions] == ["de-en", "en-de"]
    de_en, en_de = result.directions
    assert (de_en.sentences, de_en.test_sentences) == (SCORED, LINES)
    assert de_en.source_file == str(multi30k / "test_2016_flickr.de.gz")
    assert en_de.reference_file == str(multi30k / "test_2016_flickr.de.gz")
    unchecked = "not checked: its config.yaml names no training data"
    assert de_en.languages == {"ar": unchecked, "padir": unchecked}
    assert de_en.signatures.bleu.startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
    for d in result.directions:
        cells = [[f"{s.quality.bleu:.2f}", f"{s.quality.chrf:.2f}"] for s in d.systems]
        column = 3 if d.direction == "de-en" else 6
        assert [row[column : column + 2] for row in rows] == cells
    assert [s.decoding["steps"] for s in de_en.systems[1:]] == [4, 10]
    assert {s.decoding["length_beam"] for s in de_en.systems[1:]} == {5}
    assert de_en.systems[0].decoding["beam"] == 5
    # The AR model knows the first 32 pairs (BLEU 100 on them), not the last 4: the table
    # scores translations, not noise.
    assert de_en.systems[0].quality.bleu > 60

    # The recorded command asks for the same settings.
    words = shlex.split(result.command)
    assert words[:3] == ["gmlm", "analyze", "table1"]
    parsed = settings_from_args(Table1Settings, build_parser().parse_args(words[1:]))
    assert parsed == Table1Settings(
        directions=(f"de-en={folder}", f"en-de={folder}"), multi30k=multi30k, sentences=SCORED
    )

    # Each row's scores are those of `gmlm evaluate` on `gmlm translate`'s translations with
    # the flags the table gives.
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    prepared = load_dataset(word_task_data)
    write_lines(source, prepared.read_text("test", "src")[:SCORED])
    write_lines(reference, prepared.read_text("test", "tgt")[:SCORED])
    for system in de_en.systems:
        hyp = tmp_path / f"{system.system}.txt"
        translate = ["translate", "--checkpoint", system.checkpoint]
        translate += [*shlex.split(system.translate_flags), "--device", "cpu"]
        assert main([*translate, "--input", str(source), "--output", str(hyp)]) == 0
        capsys.readouterr()
        assert main(["evaluate", "--hyp", str(hyp), "--ref", str(reference), "--json"]) == 0
        scores = json.loads(capsys.readouterr().out)
        assert system.quality.bleu == round(scores["bleu"]["score"], 2), system.system
        assert system.quality.chrf == round(scores["chrf"]["score"], 2), system.system
    assert de_en.systems[1].translate_flags == "--steps 4 --length-beam 5"


def checkpoints_folder(
    folder: Path,
    data: Path,
    *,
    kinds: tuple[str, str] = ("ar", "padir"),
    recorded: Path | None = None,
) -> Path:
    """Untrained tiny checkpoints ar/ and padir/ (of the kinds `kinds`, in that order) with
    the tokenizer of the prepared dataset `data`, whose config.yaml names `recorded` (default:
    `data`) as their training data."""
    tokenizer = load_dataset(data).tokenizer
    for name, kind in zip(("ar", "padir"), kinds, strict=True):
        write_checkpoint(folder / name, kind, tokenizer, data=str(recorded or data))
    return folder


def test_languages_are_checked_against_the_training_data_where_it_is_here(
    word_task_data: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    multi30k = multi30k_test_set(tmp_path / "multi30k", word_task_data)
    here = checkpoints_folder(tmp_path / "here", word_task_data)
    plan = plan_direction(f"de-en={here}", multi30k, None)
    assert plan.languages == {
        kind: f"de-en, as its training data {word_task_data} records" for kind in ("ar", "padir")
    }
    assert len(plan.pairs.sources) == LINES
    with pytest.raises(GmlmError, match=r"translates de-en .*not en-de; name the direction de-en"):
        plan_direction(f"en-de={here}", multi30k, None)
    gone = checkpoints_folder(tmp_path / "gone", word_task_data, recorded=tmp_path / "absent")
    assert plan_direction(f"en-de={gone}", multi30k, 3).languages["padir"] == (
        f"not checked: its training data {tmp_path / 'absent'} is not on this machine"
    )
    # A dataset prepared again at that path since (another tokenizer) tells nothing.
    other = tmp_path / "other"
    for kind in ("ar", "padir"):
        write_checkpoint(other / kind, kind, tokenizer, data=str(word_task_data))
    assert plan_direction(f"en-de={other}", multi30k, 3).languages["padir"] == (
        f"not checked: {word_task_data} holds another tokenizer than the checkpoint's"
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no direction", "give at least one --direction NAME=FOLDER"),
        ("no folder", "--direction de-en=TMP/absent: no folder TMP/absent"),
        ("bad name", "--direction deen=TMP/dir: expected NAME=FOLDER"),
        ("languages", "--direction en-de=TMP/dir: TMP/dir/ar translates de-en"),
        ("kinds swapped", "--direction de-en=TMP/dir: TMP/dir/ar is a 'padir' checkpoint"),
        ("no test file", "--multi30k TMP/multi30k has no test_2016_flickr.fr[.gz]"),
        ("line counts", "line counts differ: TMP/multi30k/test_2016_flickr.de.gz has 40"),
        ("one output", "--output and --markdown both name TMP/t.json"),
        ("twice", "--direction de-en given twice; give each once"),
    ],
)
def test_errors_name_the_problem_before_any_translation(
    case: str,
    expected: str,
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kinds = ("padir", "ar") if case == "kinds swapped" else ("ar", "padir")
    # fr-en: checkpoints whose training data is not here, so that only the test file is amiss.
    recorded = tmp_path / "absent" if case == "no test file" else None
    checkpoints_folder(tmp_path / "dir", word_task_data, kinds=kinds, recorded=recorded)
    lines = LINES - 1 if case == "line counts" else LINES
    multi30k = multi30k_test_set(tmp_path / "multi30k", word_task_data, target_lines=lines)
    direction = {
        "no folder": f"de-en={tmp_path / 'absent'}",
        "bad name": f"deen={tmp_path / 'dir'}",
        "languages": f"en-de={tmp_path / 'dir'}",
        "no test file": f"fr-en={tmp_path / 'dir'}",
    }.get(case, f"de-en={tmp_path / 'dir'}")
    argv = ["analyze", "table1", "--multi30k", str(multi30k), "--device", "cpu"]
    argv += [] if case == "no direction" else ["--direction", direction]
    argv += ["--direction", direction] if case == "twice" else []
    markdown = tmp_path / ("t.json" if case == "one output" else "t.md")
    argv += ["--output", str(tmp_path / "t.json"), "--markdown", str(markdown)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gmlm: error: " + expected.replace("TMP", str(tmp_path))), err
    assert err.count("\n") == 1 and "table1:" not in err  # nothing translated
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "t.md").exists()
