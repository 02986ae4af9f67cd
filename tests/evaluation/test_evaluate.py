import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gmlm.cli.main import main
from gmlm.evaluation.bleu import corpus_scores
from gmlm.evaluation.results import Evaluation
from gmlm.evaluation.stutter import repeat_report, stutter_report

HYPS = [
    "The cat sat on the the mat.",
    "A man is riding a bicycle down the street.",
    "Two dogs dogs dogs play in the snow!",
    "She had had enough, so she left.",
    "",
    'Ein Mann, der "zitiert" — 3,5 km weit läuft.',
]
REFS = [
    "The cat sat on the mat.",
    "A man rides a bike down the street.",
    "Two dogs are playing in the snow.",
    "She had had enough and left.",
    "A child laughs.",
    "Ein Mann, der „zitiert“ 3,5 km läuft.",
]


def write(tmp: Path, name: str, lines: list[str]) -> Path:
    path = tmp / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# (hypothesis, reference, stutters): golden cases of the metric's definition
STUTTER_CASES = [
    ("the the cat", "the cat", 1),
    ("the The cat", "the cat", 1),  # case-insensitive
    ("had had enough", "had had enough", 0),  # repeats the reference has are not stutters
    ("a a a b", "a b", 2),  # three in a row = two adjacent repeats
    ("a a a b", "a a b", 1),
    ("stop . . now", "stop now", 0),  # punctuation is not a word
    ("x y x y", "x y", 0),  # only adjacent repeats count
    ("", "a a", 0),
]


@pytest.mark.parametrize("hyp, ref, expected", STUTTER_CASES)
def test_stutter_golden_cases(hyp, ref, expected):
    assert stutter_report([hyp], [ref]).stutters == expected


def test_stutter_rates_and_control():
    report = stutter_report(["the the cat sat", "a dog"], ["the cat sat", "a a dog"])
    assert report.stutters == 1 and report.hypothesis_words == 6
    assert report.stutters_per_100_words == pytest.approx(100 / 6)
    assert report.sentences_with_stutter == 0.5
    assert report.reference_repeats_per_100_words == pytest.approx(100 / 6)


def test_scores_identical_to_sacrebleu_command(tmp_path):
    hyp = write(tmp_path, "hyp.txt", HYPS)
    ref = write(tmp_path, "ref.txt", REFS)
    exe = shutil.which("sacrebleu") or str(Path(sys.executable).parent / "sacrebleu")
    if not Path(exe).exists():
        pytest.skip("the sacrebleu command is not installed")
    out = subprocess.run(
        [exe, str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-f", "json", "-w", "4"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    golden = json.loads(out)
    ours = corpus_scores(HYPS, REFS)
    assert ours["bleu"].score == pytest.approx(golden[0]["score"], abs=5e-5)
    assert ours["chrf"].score == pytest.approx(golden[1]["score"], abs=5e-5)
    assert ours["bleu"].signature == golden[0]["signature"]
    assert ours["chrf"].signature == golden[1]["signature"]
    lengths = re.search(r"hyp_len = (\d+) ref_len = (\d+)", golden[0]["verbose_score"])
    assert lengths is not None
    assert ours["bleu"].length_ratio == int(lengths[1]) / int(lengths[2])
    assert ours["chrf"].length_ratio is None


def test_cli_json_and_errors(tmp_path, capsys):
    hyp = write(tmp_path, "hyp.txt", HYPS)
    ref = write(tmp_path, "ref.txt", REFS)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert data["stutter"]["stutters"] == 3
    assert data["bleu"]["length_ratio"] == corpus_scores(HYPS, REFS)["bleu"].length_ratio
    assert "length_ratio" not in data["chrf"]
    short = write(tmp_path, "short.txt", REFS[:2])
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(short)]) == 2
    assert "has 6 lines" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe broken\n" + b"x\n" * 4)
    assert main(["evaluate", "--hyp", str(bad), "--ref", str(ref)]) == 2
    assert "bad.txt:2: invalid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("code", "tokenizer"),
    [("zh", "zh"), ("ZH", "zh"), ("zh-CN", "zh"), ("zh_Hans", "zh"), ("zho", "zh"), ("de", "13a")],
)
def test_target_language_codes_choose_the_tokenizer(tmp_path, capsys, code, tokenizer):
    hyp = write(tmp_path, "hyp.txt", ["一个男人在沙发睡觉。"])
    ref = write(tmp_path, "ref.txt", ["一个男人在沙发上睡觉。"])
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--target-lang", code]) == 0
    assert f"tok:{tokenizer}" in capsys.readouterr().out


@pytest.mark.parametrize("code", ["", "chinese", "z", "zh CN", "1a", "zh-"])
def test_a_target_language_that_is_no_code_is_refused(tmp_path, capsys, code):
    hyp = write(tmp_path, "hyp.txt", HYPS)
    ref = write(tmp_path, "ref.txt", REFS)
    argv = ["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenize", "13a"]
    assert main([*argv, "--target-lang", code]) == 2
    assert f"gmlm: error: {code!r} is not a language code" in capsys.readouterr().err


def test_cli_reports_repeated_ngrams(tmp_path, capsys):
    hyps, refs = ["A girl in a field in a field.", "a dog"], ["A girl in a field.", "a a dog"]
    hyp, ref = write(tmp_path, "hyp.txt", hyps), write(tmp_path, "ref.txt", refs)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    evaluation = Evaluation.from_json(json.loads(capsys.readouterr().out))
    assert evaluation.stutter.hypothesis_ngram_repeats == repeat_report(hyps)
    assert evaluation.stutter.reference_ngram_repeats == repeat_report(refs)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 0
    printed = capsys.readouterr().out.splitlines()
    start = printed.index(
        "repeated n-grams (words[i:i+n] == words[i+n:i+2n]): hypothesis | reference (control)"
    )
    none = "0.00% of lines, 0.000 per 100 words"
    assert printed[start + 1 :] == [
        f"  n=1: {none} | 50.00% of lines, 12.500 per 100 words",
        f"  n=2: {none} | {none}",
        f"  n=3: 50.00% of lines, 10.000 per 100 words | {none}",
        f"  n=4: {none} | {none}",
        "  lines with a repeated phrase (2-4 words): 1 of 2 lines (50.00%) | 0 of 2 lines (0.00%)",
    ]
