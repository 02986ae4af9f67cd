"""PaDIR's final dedup on the detokenized words (gmlm.translation.word_repeats): a table of
lines and what the rule leaves of them, and the rule's place in `Translator`: every PaDIR
output text goes through it unless `dedup` or `dedup_words` is off, an AR output never."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import gmlm
from gmlm.decoding.options import RefinementOptions, SearchOptions
from gmlm.translation import translator as translator_module
from gmlm.translation.word_repeats import drop_repeated_words
from tests.helpers.checkpoints import write_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

# (line, longest, what the rule leaves of it)
CASES = [
    # the same word in another case, and a repeat spelt with other pieces (seen in PaDIR's
    # English-German output on `val`)
    ("und vier Vier fährt", 4, "und vier fährt"),
    ("Bei bei in nachts", 4, "Bei in nachts"),
    ("stehen auf einer U-Bahn auf einer U-Bahn.", 4, "stehen auf einer U-Bahn."),
    ("an einem verschneiten Tag an einem verschneiten Tag.", 4, "an einem verschneiten Tag."),
    # longer than `longest` words: kept
    ("an einem verschneiten Tag an einem verschneiten Tag.", 3, None),
    ("auf einer U-Bahn auf einer U-Bahn.", 2, None),
    # a triple repeat, and two repeats in one line
    ("the the the cat", 1, "the cat"),
    ("a dog a dog runs runs.", 4, "a dog runs."),
    # punctuation inside the repeat: a comma may end a clause, so no repeat
    ("lächeln, lächeln auf", 4, None),
    ("Ein Mann, der fährt, fährt schnell.", 4, None),
    ("Tag. Tag.", 4, None),
    # punctuation standing alone is not a word
    ("wait - - now", 4, None),
    ("... ...", 4, None),
    # no repeat: the line as it was, spacing included
    ("no  repeat   here ", 4, None),
    ("", 4, None),
    ("Katze Katzen", 4, None),
]


@pytest.mark.parametrize(("line", "longest", "expected"), CASES)
def test_the_rule_on_a_table_of_lines(line: str, longest: int, expected: str | None) -> None:
    assert drop_repeated_words(line, longest) == (line if expected is None else expected)


def test_the_rule_leaves_no_repeat_it_would_drop() -> None:
    for line, longest, _ in CASES:
        once = drop_repeated_words(line, longest)
        assert drop_repeated_words(once, longest) == once


REPEATED = "the big cat The big cat."


@pytest.fixture
def forced_output(
    word_task_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> gmlm.Translator:
    """A PaDIR translator whose decoder outputs REPEATED for every sentence."""
    from gmlm.data.binarized import load_dataset

    tokenizer = load_dataset(word_task_data).tokenizer
    folder = write_checkpoint(tmp_path / "padir", "padir", tokenizer)
    repeated = tokenizer.encode(REPEATED)
    assert tokenizer.decode(repeated) == REPEATED
    original = translator_module.refine

    def refine(*args: Any, **kwargs: Any) -> Any:
        return [dataclasses.replace(r, tokens=repeated) for r in original(*args, **kwargs)]

    monkeypatch.setattr(translator_module, "refine", refine)
    return gmlm.load(folder, device="cpu")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, "the big cat."),
        ({"dedup_words": False}, REPEATED),
        ({"dedup": False}, REPEATED),
        ({"stutter_ngram": 2}, REPEATED),  # a run of 3 words
    ],
)
def test_every_padir_output_text_goes_through_it(
    forced_output: gmlm.Translator, settings: dict[str, Any], expected: str
) -> None:
    translator = forced_output
    assert translator.translate(["a cat", "the dog"], **settings) == [expected] * 2
    ids = [translator.tokenizer.encode("a cat")]
    options = translator.options(**settings)
    assert translator.translate_lines(ids, options) == [expected]  # as `gmlm serve` calls
    assert translator.text(translator.tokenizer.encode(REPEATED), options) == expected


def test_ar_output_text_is_left_as_decoded(word_task_data: Path, tmp_path: Path) -> None:
    from gmlm.data.binarized import load_dataset

    tokenizer = load_dataset(word_task_data).tokenizer
    translator = gmlm.load(write_checkpoint(tmp_path / "ar", "ar", tokenizer), device="cpu")
    assert translator.text(tokenizer.encode(REPEATED)) == REPEATED
    assert translator.text(tokenizer.encode(REPEATED), SearchOptions()) == REPEATED
    assert RefinementOptions().dedup_words  # on by default for PaDIR
